// configs/mqar_tiny.json end to end through the real binary: training on MQAR batches writes an
// mqar record at each validation, resuming continues the data stream exactly, and `hybrid eval
// mqar` scores the checkpoint on the same test set as training's last validation.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "process.h"

namespace fs = std::filesystem;

namespace {

std::vector<nlohmann::json> records(const fs::path& file, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == kind) out.push_back(j);
  }
  return out;
}

hyb::ProcessResult hybrid(std::vector<std::string> args) {
  args.insert(args.begin(), HYBRID_BINARY);
  return hyb::run_process(args, "");
}

}  // namespace

TEST_CASE("configs/mqar_tiny.json trains on MQAR, validates with mqar records and resumes exactly", "[train][mqar]") {
  const fs::path d = fs::temp_directory_path() / "hybrid_tests" / "mqar_train";
  fs::remove_all(d);
  const std::string cfg = std::string(HYBRID_SOURCE_DIR) + "/configs/mqar_tiny.json";
  // Four short steps (two per segment), validation and a checkpoint every two.
  std::vector<std::string> args{"train", "--config", cfg};
  for (const char* s : {"train.steps=4", "train.eval_interval=2", "train.checkpoint_interval=2", "train.log_interval=1",
                        "data.mqar.test_examples=16"})
    args.insert(args.end(), {"--set", s});
  auto run = [&](const char* name, std::vector<std::string> extra) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--set", "train.out_dir=\"" + (d / name).string() + "\""});
    a.insert(a.end(), extra.begin(), extra.end());
    return hybrid(a);
  };

  hyb::ProcessResult a = run("a", {});
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const auto val = records(d / "a" / "metrics.jsonl", "mqar");
  REQUIRE(val.size() == 2);
  CHECK(val[1]["step"] == 4);
  CHECK(val[1]["preset"].is_null());
  CHECK(val[1]["V"] == 256);
  REQUIRE(val[1]["segments"].size() == 2);
  CHECK(val[1]["segments"][0]["seq_len"] == 32);
  CHECK(val[1]["segments"][1]["n_kv"] == 8);
  CHECK(val[1]["segments"][1]["examples"] == 16);
  const double recall = val[1]["recall_score"].get<double>();
  CHECK((recall >= 0 && recall <= 1));
  CHECK(records(d / "a" / "metrics.jsonl", "ppl").empty());

  // Resuming at step 2 draws the same batches: the same step-4 loss and validation.
  hyb::ProcessResult b = run("b", {"--resume", (d / "a" / "ckpt" / "step_0000002").string()});
  INFO(b.output);
  REQUIRE(b.exit_code == 0);
  const auto ta = records(d / "a" / "metrics.jsonl", "train"), tb = records(d / "b" / "metrics.jsonl", "train");
  REQUIRE(ta.size() == 4);
  REQUIRE(tb.size() == 2);
  CHECK(tb.back()["loss"] == ta.back()["loss"]);
  CHECK(records(d / "b" / "metrics.jsonl", "mqar").back()["recall_score"] == val[1]["recall_score"]);

  hyb::ProcessResult e = hybrid({"eval", "mqar", "--checkpoint", (d / "a").string()});
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  CHECK(e.output.find("recall score") != std::string::npos);
  const auto ev = records(d / "a" / "ckpt" / "step_0000004" / "eval.jsonl", "mqar");
  REQUIRE(ev.size() == 1);
  CHECK(ev[0]["step"] == 4);
  CHECK(ev[0]["recall_score"] == val[1]["recall_score"]);
  CHECK(ev[0]["segments"] == val[1]["segments"]);
}
