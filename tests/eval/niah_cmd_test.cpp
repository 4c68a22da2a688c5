// `hybrid eval niah` through the real binary on a one-step GPT-2 checkpoint: a record per cell and a
// summary, the table, the heat map; a length too short for the needle fails naming it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../data/data_test_util.h"
#include "data/shard.h"
#include "process.h"

namespace fs = std::filesystem;
using namespace hyb;

TEST_CASE("hybrid eval niah writes a record per cell, the summary and the heat map", "[eval][niah][cli]") {
  const std::string d = test::fresh_dir("niah_cmd");
  write_shard(d + "/train.bin", test::random_tokens(3000, 50257, 1));
  write_shard(d + "/val.bin", test::random_tokens(600, 50257, 2));
  const nlohmann::json cfg = {
      {"model", {{"d_model", 16}, {"num_layers", 1}, {"block", {{"mixer", {{"type", "attention"}, {"num_heads", 2}}}}}}},
      {"data", {{"train", d + "/train.bin"}, {"val", d + "/val.bin"}, {"seq_len", 64}}},
      {"train", {{"batch_size", 2}, {"steps", 1}, {"checkpoint_interval", 1}, {"eval_interval", 1}, {"out_dir", d + "/run"},
                 {"optimizer", {{"lr", 1e-3}}}}},
      {"eval", {{"max_windows", 2}}}};
  std::ofstream(d + "/cfg.json") << cfg.dump();
  auto hybrid = [](std::vector<std::string> args) { return run_hybrid(HYBRID_BINARY, std::move(args)); };
  const ProcessResult train = hybrid({"train", "--config", d + "/cfg.json"});
  INFO(train.output);
  REQUIRE(train.exit_code == 0);

  const ProcessResult run = hybrid({"eval", "niah", "--checkpoint", d + "/run", "--haystack", "filler", "--lengths", "48",
                                    "64", "96", "--depths", "0", "100", "--trials", "3", "--svg", d + "/niah.svg", "--out",
                                    d + "/niah.jsonl"});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("niah [6/6] L 96 depth 100%") != std::string::npos);
  CHECK(run.output.find("| depth | 48 | 64 | 96* |") != std::string::npos);
  std::vector<nlohmann::json> cells, summary;
  std::ifstream in(d + "/niah.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    (j["kind"] == "niah" ? cells : summary).push_back(j);
  }
  REQUIRE(cells.size() == 6);
  REQUIRE(summary.size() == 1);
  CHECK(cells[1]["L"] == 48);
  CHECK(cells[1]["depth"] == 1.0);
  CHECK(cells[1]["depth_actual_mean"] == 1.0);
  CHECK(cells[5]["L"] == 96);
  for (const auto& c : cells) {
    CHECK(c["trials"] == 3);
    CHECK(c["acc"].get<double>() == c["correct"].get<double>() / 3);
  }
  CHECK(summary[0]["kind"] == "niah.summary");
  CHECK(summary[0]["haystack"] == "filler");
  CHECK(summary[0]["T_train"] == 64);
  CHECK(summary[0]["step"] == 1);
  // One random step cannot copy: the locality cell fails, and the run says so.
  CHECK(summary[0]["flags"] == nlohmann::json::array({"no_local_copy"}));
  CHECK(run.output.find("no_local_copy") != std::string::npos);
  const std::string svg = test::read_bytes(d + "/niah.svg");
  CHECK(svg.find(">96</text>") != std::string::npos);
  CHECK(svg.find(">0%</text>") != std::string::npos);
  CHECK(svg.find("stroke-dasharray") != std::string::npos);

  const ProcessResult shorter = hybrid({"eval", "niah", "--checkpoint", d + "/run", "--haystack", "filler", "--lengths", "40",
                                        "--out", d + "/x.jsonl"});
  CHECK(shorter.exit_code != 0);
  CHECK(shorter.output.find("L = 40") != std::string::npos);
  CHECK_FALSE(fs::exists(d + "/x.jsonl"));
}
