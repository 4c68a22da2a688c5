// `hybrid ablate` end to end through the real binary on a CPU-sized suite: two tasks, a trained row,
// an inference-time row on the base row's weights, two seeds run two at a time; the table, the
// records and the unit directories; --resume reusing every finished unit; --dry-run; the budget stop.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "process.h"
#include "train/run_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

hyb::ProcessResult hybrid(std::vector<std::string> args) {
  args.insert(args.begin(), HYBRID_BINARY);
  return hyb::run_process(args, "");
}

std::vector<json> records(const fs::path& file, const std::string& kind) {
  std::vector<json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    if (j["kind"] == kind) out.push_back(j);
  }
  return out;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

json tiny_suite(const std::string& d, double budget_s) {
  json train = {{"device", "cpu"}, {"precision", "fp32"}, {"batch_size", 8}, {"steps", 6}, {"log_interval", 2},
                {"schedule", {{"type", "constant"}}}, {"optimizer", {{"lr", 0.003}}}};
  json block = {{"mixer", {{"type", "attention"}, {"num_heads", 2}}}};
  json lm = {{"model", {{"d_model", 32}, {"num_layers", 2}, {"block", block}}},
             {"data", {{"tokenizer", "byte"}, {"train", d + "/train.bin"}, {"val", d + "/val.bin"}, {"seq_len", 32}}},
             {"train", train}};
  json mqar = {{"model", {{"d_model", 32}, {"num_layers", 2}, {"block", block}}},
               {"data", {{"task", "mqar"}, {"mqar", {{"vocab", 256}, {"segments", {{{"seq_len", 32}, {"n_kv", 4}}}}, {"test_examples", 16}}}}},
               {"train", train}};
  return {
      {"suite", "tiny"},
      {"paper", {{"name", "Tiny"}, {"arxiv", "0000.00000"}, {"table", "1"}, {"caption", "A test table"}, {"setting", "none"}}},
      {"budget_s", budget_s},
      {"seeds", {0, 1}},
      {"tasks", {{"lm", {{"config", lm}, {"eval", {{{"metric", "ppl"}, {"split", "tiny.val"}, {"data", d + "/val.bin"}}}}}},
                 {"mqar", {{"config", mqar}, {"eval", {{{"metric", "mqar"}}}}}}}},
      {"columns", {{{"id", "loss"}, {"paper", "Loss"}, {"paper_better", "lower"}, {"ours", "lm.ppl.tiny.val.loss"}, {"ours_better", "lower"}},
                   {{"id", "recall"}, {"paper", "Recall"}, {"ours", "mqar.mqar.recall_score"}, {"ours_better", "higher"}}}},
      {"rows", {{{"name", "Full"}, {"base", true}, {"paper", {{"loss", 3.0}, {"recall", 50.0}}}},
                {{"name", "Window 4"}, {"set", {{"model.block.mixer.window", 4}}}, {"paper", {{"loss", 3.1}, {"recall", nullptr}}},
                 {"paper_note", "not in the paper"}},
                {{"name", "Full, window 2 at eval"}, {"eval_set", {{"model.layers[*].mixer.window", 2}}}}}},
      {"claims", {{{"id", "window/loss"}, {"column", "loss"}, {"a", "Full"}, {"b", "Window 4"}, {"expect", "a_better"},
                   {"strength", "primary"}, {"paper_delta", -0.1}},
                  {{"id", "eval-window/recall"}, {"column", "recall"}, {"a", "Full"}, {"b", "Full, window 2 at eval"}, {"expect", "tie"},
                   {"strength", "secondary"}}}},
      {"deviations", {"a model of 32 channels"}},
      {"calibration", {{"steps", 6}, {"base_recall", 0.5}}}};
}

}  // namespace

TEST_CASE("hybrid ablate trains, evaluates and tabulates a suite; --resume reuses its units", "[ablate][train]") {
  const std::string d = hyb::tiny_run_dir("ablate_cmd", "the quick brown fox jumps over the lazy dog. ", 5);
  const fs::path suite = fs::path(d) / "suite.json";
  std::ofstream(suite) << tiny_suite(d, 600).dump(2);
  const fs::path out = fs::path(d) / "run";

  hyb::ProcessResult r = hybrid({"ablate", suite.string(), "--out", out.string(), "--jobs", "2"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("Tiny Table 1 — A test table (arXiv 0000.00000)   seeds 0,1"));
  CHECK_THAT(r.output, Catch::Contains("| Full | — | 3 |"));
  CHECK_THAT(r.output, Catch::Contains("| Window 4 | window=4 | 3.1 |"));
  CHECK_THAT(r.output, Catch::Contains("| Full, window 2 at eval | window=2 |"));
  CHECK_THAT(r.output, Catch::Contains("| window/loss | primary | -0.10 |"));
  CHECK_THAT(r.output, Catch::Contains("primary: ") && Catch::Contains("secondary: "));
  CHECK_THAT(r.output, Catch::Contains("- a model of 32 channels"));
  CHECK_THAT(r.output, Catch::Contains("Calibration (ablations.md 2.5, chosen on the base row before the others ran): {\"base_recall\":0.5,\"steps\":6}"));
  CHECK_THAT(r.output, Catch::Contains("- Window 4, paper: not in the paper"));
  CHECK(read_text(out / "table.md").find("| window/loss | primary |") != std::string::npos);

  // 3 rows x 2 tasks x 2 seeds, each finished, the inference-time row on the base row's weights.
  const std::vector<json> runs = records(out / "results.jsonl", "ablate.run");
  REQUIRE(runs.size() == 12);
  for (const json& u : runs) {
    INFO(u.dump());
    CHECK(u["status"] == "done");
    CHECK(u["metrics"].size() > 0);
  }
  CHECK(records(out / "results.jsonl", "ablate.claim").size() == 2);
  REQUIRE(records(out / "results.jsonl", "ablate.summary").size() == 1);
  const fs::path base0 = out / "rows" / "full" / "lm" / "seed0";
  CHECK(fs::exists(base0 / "config.json"));
  CHECK(fs::exists(base0 / "metrics.jsonl"));
  CHECK(fs::exists(base0 / "eval.jsonl"));
  CHECK(fs::exists(base0 / "ckpt"));  // kept: the inference-time row evaluates it
  CHECK_FALSE(fs::exists(out / "rows" / "window-4" / "lm" / "seed0" / "ckpt"));
  CHECK(fs::exists(out / "rows" / "full-window-2-at-eval" / "mqar" / "seed1" / "result.json"));
  // The seeds are different runs; the same unit gives the same number however the units were scheduled.
  auto loss_of = [&](const std::string& row, int seed) {
    for (const json& u : runs)
      if (u["row"] == row && u["task"] == "lm" && u["seed"] == seed) return u["metrics"]["ppl.tiny.val.loss"].get<double>();
    return -1.0;
  };
  CHECK(loss_of("Full", 0) != loss_of("Full", 1));
  CHECK(loss_of("Full", 0) != loss_of("Window 4", 0));

  hyb::ProcessResult again = hybrid({"ablate", suite.string(), "--resume", out.string(), "--jobs", "1"});
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("12 of 12 units finished earlier and are reused"));
  const std::vector<json> runs2 = records(out / "results.jsonl", "ablate.run");
  REQUIRE(runs2.size() == 12);
  for (size_t i = 0; i < runs.size(); ++i) CHECK(runs2[i]["metrics"] == runs[i]["metrics"]);
}

TEST_CASE("hybrid ablate --dry-run estimates without training; over the budget it stops", "[ablate][train]") {
  const std::string d = hyb::tiny_run_dir("ablate_dry", "pack my box with five dozen liquor jugs. ", 6);
  const fs::path suite = fs::path(d) / "suite.json";
  std::ofstream(suite) << tiny_suite(d, 600).dump(2);
  hyb::ProcessResult r = hybrid({"ablate", suite.string(), "--out", (fs::path(d) / "dry").string(), "--dry-run"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("12 units") && Catch::Contains("ablate: estimate "));
  CHECK_THAT(r.output, Catch::Contains("Window 4") && Catch::Contains("window=4"));
  CHECK_FALSE(fs::exists(fs::path(d) / "dry" / "suite.json"));

  std::ofstream(suite) << tiny_suite(d, 0.01).dump(2);
  hyb::ProcessResult over = hybrid({"ablate", suite.string(), "--out", (fs::path(d) / "over").string()});
  INFO(over.output);
  CHECK(over.exit_code == 3);
  CHECK_THAT(over.output, Catch::Contains("over 1.2 x budget_s"));
  CHECK_FALSE(fs::exists(fs::path(d) / "over" / "rows"));
}
