// Suite files (ablations.md 3): every checked-in suite parses and resolves, and each kind of
// mistake fails with the suite file, the path of the key and what is wrong.
#include <catch2/catch.hpp>

#include <filesystem>

#include "eval/ablate/ablate_plan.h"
#include "eval/ablate/ablate_suite.h"
#include "train/config/config_json.h"

namespace fs = std::filesystem;
using hyb::Json;

namespace {

// Suites name their configs relative to the repository root, as `hybrid ablate` is run from there.
struct InSourceDir {
  fs::path old = fs::current_path();
  InSourceDir() { fs::current_path(HYBRID_SOURCE_DIR); }
  ~InSourceDir() { fs::current_path(old); }
};

Json minimal() {
  return Json::parse(R"({
    "suite": "t", "seeds": [0, 1],
    "tasks": {"mqar": {"config": {"model": {"d_model": 32, "num_layers": 1, "block": {"mixer": {"type": "attention", "num_heads": 2}}},
                                  "data": {"task": "mqar", "mqar": {"vocab": 256, "segments": [{"seq_len": 32, "n_kv": 4}], "test_examples": 16}},
                                  "train": {"device": "cpu", "precision": "fp32", "batch_size": 4, "steps": 2, "optimizer": {"lr": 0.001},
                                            "schedule": {"type": "constant"}}},
                       "eval": [{"metric": "mqar"}]}},
    "columns": [{"id": "recall", "paper": "Recall", "ours": "mqar.mqar.recall_score", "ours_better": "higher"}],
    "rows": [{"name": "Base", "base": true, "paper": {"recall": 38.6}},
             {"name": "One head", "set": {"model.block.mixer.num_heads": 1, "model.block.mixer.head_dim": 8}}],
    "claims": [{"id": "heads", "column": "recall", "a": "Base", "b": "One head", "expect": "a_better", "strength": "primary"}]
  })");
}

std::string error_of(const Json& j) {
  try {
    hyb::parse_suite(j, "s.json");
  } catch (const hyb::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parse_suite reads rows, columns, claims and their defaults", "[ablate]") {
  const hyb::AblateSuite s = hyb::parse_suite(minimal(), "s.json");
  CHECK(s.name == "t");
  CHECK(s.budget_s == 600);
  CHECK(s.seeds == std::vector<int64_t>{0, 1});
  REQUIRE(s.rows.size() == 2);
  CHECK(s.base_row().name == "Base");
  CHECK(s.rows[1].slug == "one-head");
  REQUIRE(s.rows[1].set.size() == 2);
  CHECK(s.rows[1].set[1].path == "model.block.mixer.head_dim");
  CHECK(s.rows[1].tasks == std::vector<std::string>{"mqar"});
  const hyb::AblateColumn& c = s.column("recall");
  CHECK(c.ours.task == "mqar");
  CHECK(c.ours.metric == "mqar");
  CHECK(c.ours.field == "recall_score");
  CHECK(c.delta_min == 0.01);  // an accuracy's floor (2.4 item 6)
  CHECK(c.eps == 0.02);
  CHECK(s.rows[0].paper.at("recall") == 38.6);
  CHECK(hyb::row_slug("w/o Long-Mem") == "w-o-long-mem");
  CHECK(hyb::row_slug("1:8 (Optimized)") == "1-8-optimized");
  CHECK(hyb::split_shard("brown.val") == "data/brown_tok/brown.val.bin");
  CHECK(hyb::split_shard("ts.val") == "data/ts/ts.val.bin");
  CHECK_THROWS_WITH(hyb::split_shard("wiki.val"), Catch::Contains("unknown split \"wiki.val\""));
}

TEST_CASE("parse_suite names the file, the key and the problem", "[ablate]") {
  Json j = minimal();
  j["rows"][1]["sett"] = j["rows"][1]["set"];
  CHECK_THAT(error_of(j), Catch::Contains("s.json: rows[1].sett: unknown key") && Catch::Contains("set"));
  j = minimal();
  j["rows"][1]["base"] = true;
  CHECK_THAT(error_of(j), Catch::Contains("s.json: rows: expected exactly one row with \"base\": true, found 2"));
  j = minimal();
  j["claims"][0]["b"] = "Two heads";
  CHECK_THAT(error_of(j), Catch::Contains("s.json: claims[0].b") && Catch::Contains("no row named \"Two heads\""));
  j = minimal();
  j["columns"][0]["ours"] = "lm.ppl.brown.val.loss";
  CHECK_THAT(error_of(j), Catch::Contains("s.json: columns[0].ours") && Catch::Contains("\"lm\" is not a task of the suite"));
  j = minimal();
  j["columns"][0]["ours"] = "mqar.ppl.brown.val.loss";
  CHECK_THAT(error_of(j), Catch::Contains("task \"mqar\" has no evaluation ppl on brown.val"));
  j = minimal();
  j["tasks"]["mqar"]["eval"] = Json::parse(R"([{"metric": "ppl"}])");
  CHECK_THAT(error_of(j), Catch::Contains("s.json: tasks.mqar.eval") && Catch::Contains("names its split"));
  j = minimal();
  j["rows"][1]["set"] = Json::parse(R"({"lm:model.d_model": 64})");
  CHECK_THAT(error_of(j), Catch::Contains("rows[1].set.lm:model.d_model") && Catch::Contains("\"lm\" is not a task"));
  j = minimal();
  j["bench"] = Json::parse(R"({"prefill": [128], "decode": 16})");
  CHECK_THAT(error_of(j), Catch::Contains("s.json: bench") && Catch::Contains("not implemented yet"));
  j = minimal();
  j["rows"][1]["eval_set"] = Json::parse(R"({"model.layers[0].mixer.window": 4})");
  CHECK_THAT(error_of(j), Catch::Contains("rows[1]") && Catch::Contains("inference-time row"));
}

TEST_CASE("plan_suite resolves each row through the config resolver and names the row of a bad key", "[ablate]") {
  hyb::AblateSuite s = hyb::parse_suite(minimal(), "s.json");
  const hyb::AblatePlan plan = plan_suite(s, {0, 1}, {}, "out");
  REQUIRE(plan.units.size() == 4);  // seed-major: both rows of seed 0, then seed 1
  CHECK(plan.units[0].spec.row == "Base");
  CHECK(plan.units[1].spec.row == "One head");
  CHECK(plan.units[2].spec.seed == 1);
  CHECK(plan.units[1].dir == "out/rows/one-head/mqar/seed0");
  CHECK(plan.units[1].spec.config["model"]["layers"][0]["mixer"]["num_heads"] == 1);
  CHECK(plan.units[1].spec.config["model"]["layers"][0]["mixer"]["head_dim"] == 8);
  CHECK(plan.units[1].spec.config["train"]["seed"] == 0);
  CHECK(plan.units[0].spec.key != plan.units[2].spec.key);
  const hyb::PlannedRowTask& one = plan.row_task("One head", "mqar");
  CHECK(one.changes == std::vector<std::string>{"num_heads=1", "head_dim=8"});
  CHECK(one.non_embedding < plan.row_task("Base", "mqar").non_embedding);

  Json j = minimal();
  j["rows"][1]["set"] = Json::parse(R"({"model.block.mixer.num_haeds": 1})");
  s = hyb::parse_suite(j, "s.json");
  CHECK_THROWS_WITH(plan_suite(s, {0}, {}, "out"), Catch::Contains("s.json: row \"One head\", task mqar") && Catch::Contains("num_haeds"));
}

TEST_CASE("plan_suite: match_params keeps the value whose count is closest to the target's", "[ablate]") {
  Json j = minimal();
  j["rows"].push_back(Json::parse(R"({"name": "Matched", "set": {"model.num_layers": 2},
      "match_params": {"key": "model.block.mlp.intermediate_size", "from": 8, "to": 256, "step": 8, "tolerance": 0.1}})"));
  const hyb::AblateSuite s = hyb::parse_suite(j, "s.json");
  const hyb::AblatePlan plan = plan_suite(s, {0}, {"Matched"}, "out");
  const hyb::PlannedRowTask& m = plan.row_task("Matched", "mqar");
  const int64_t goal = plan.row_task("Base", "mqar").non_embedding;
  REQUIRE(m.changes.size() == 2);
  CHECK_THAT(m.changes[1], Catch::StartsWith("intermediate_size="));
  const int64_t kept = std::stoll(m.changes[1].substr(18));
  // Two layers with a narrower MLP hold about as many parameters as the one-layer base, and no
  // other candidate is closer.
  CHECK(std::llabs(m.non_embedding - goal) <= goal / 10);
  for (int64_t other : {kept - 8, kept + 8}) {
    hyb::AblateSuite t = s;
    t.rows[2].match_params.reset();
    t.rows[2].set.push_back({"", "model.block.mlp.intermediate_size", Json(other)});
    const int64_t c = plan_suite(t, {0}, {"Matched"}, "out").row_task("Matched", "mqar").non_embedding;
    CHECK(std::llabs(c - goal) >= std::llabs(m.non_embedding - goal));
  }
  CHECK_THAT(m.match_note, Catch::Contains("model.block.mlp.intermediate_size=" + std::to_string(kept)));
  // Without --rows every row runs, the matched one and the two without match_params alike.
  CHECK(plan_suite(s, {0}, {}, "out").row_tasks.size() == 3);
}

TEST_CASE("every suite under configs/ablate parses, and plans where its shards exist", "[ablate]") {
  InSourceDir here;
  int parsed = 0;
  for (const auto& e : fs::directory_iterator("configs/ablate")) {
    const Json j = hyb::read_config_file(e.path().string());
    if (!j.contains("suite")) continue;  // a base config
    INFO(e.path().string());
    const hyb::AblateSuite s = hyb::load_suite(e.path().string());
    ++parsed;
    bool shards = true;
    for (const hyb::AblateTask& t : s.tasks)
      for (const hyb::AblateEval& ev : t.evals) shards = shards && (ev.data.empty() || fs::exists(ev.data));
    if (!shards) continue;  // planning resolves the data files, which `hybrid tokenize` writes
    const hyb::AblatePlan plan = plan_suite(s, s.seeds, {}, "out");
    CHECK(plan.units.size() >= s.rows.size() * s.seeds.size());
  }
  CHECK(parsed >= 6);  // NHA Tables 5 to 8, Meta Table 4's two suites
}
