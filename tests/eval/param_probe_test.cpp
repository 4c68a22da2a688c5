// The parameter probes of eval.md 6.3: the pha.mix table from logged weights (window mean and max
// deviation), and through the real binary a tiny PHA run that logs probe.pha_mix and probe.param
// records at each validation, `hybrid eval probes` printing its Table 9, and a probe glob that
// matches nothing refused before training.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../data/data_test_util.h"
#include "data/shard.h"
#include "eval/param_probe.h"
#include "process.h"

namespace fs = std::filesystem;
using namespace hyb;

TEST_CASE("pha_mix_table prints Table 9's columns GSS, Attention, FFN: the window's mean per layer, the average and "
          "the largest change",
          "[eval][probe]") {
  const std::vector<std::vector<PhaMixRow>> window = {
      {{0, 0.30, 0.50, 0.20}, {1, 0.25, 0.45, 0.30}},
      {{0, 0.32, 0.46, 0.22}, {1, 0.25, 0.45, 0.30}},
  };
  REQUIRE(pha_mix_table(window) ==
          "| layer | GSS | Attention | FFN |\n| --- | --- | --- | --- |\n"
          "| L0 | 48.0 | 31.0 | 21.0 |\n| L1 | 45.0 | 25.0 | 30.0 |\n| Average | 46.5 | 28.0 | 25.5 |\n"
          "\nwindow_mean over 2 evaluations; window_max_dev 4.00 points\n");
  REQUIRE_THROWS_WITH(pha_mix_table({{{0, 1, 0, 0}}, {}}),
                      "pha.mix: no PHA mixing weights to report");
}

TEST_CASE("a PHA run logs pha.mix and the param_probes at each validation, and hybrid eval probes prints the table",
          "[eval][probe][cli]") {
  const std::string d = test::fresh_dir("pha_probes");
  write_shard(d + "/train.bin", test::random_tokens(3000, 50257, 1));
  write_shard(d + "/val.bin", test::random_tokens(600, 50257, 2));
  const nlohmann::json mixer = {{"type", "pha"},
                                {"dropout", 0.0},
                                {"attn", {{"type", "attention"}, {"num_heads", 2}, {"num_kv_heads", 1}, {"head_dim", 8}, {"logits", "cosine"}}},
                                {"gss", {{"expand", 2}, {"dss_dim", 8}, {"dss_state", 4}}},
                                {"aux_mlp", {{"type", "swiglu"}, {"expansion", 1.0}}}};
  nlohmann::json cfg = {
      {"model", {{"d_model", 16}, {"num_layers", 2}, {"block", {{"mixer", mixer}, {"mlp", {{"type", "swiglu"}, {"expansion", 2.0}}}}}}},
      {"data", {{"train", d + "/train.bin"}, {"val", d + "/val.bin"}, {"seq_len", 32}}},
      {"train", {{"batch_size", 2}, {"steps", 4}, {"checkpoint_interval", 4}, {"eval_interval", 2}, {"out_dir", d + "/run"},
                 {"optimizer", {{"lr", 3e-2}}}}},
      {"eval", {{"max_windows", 2}, {"param_probes", {"*.mix_logits", "model.layers.0.mixer.attn.logit_scale"}}}}};
  std::ofstream(d + "/cfg.json") << cfg.dump();
  auto hybrid = [](std::vector<std::string> args) { return run_hybrid(HYBRID_BINARY, std::move(args)); };
  const ProcessResult train = hybrid({"train", "--config", d + "/cfg.json"});
  INFO(train.output);
  REQUIRE(train.exit_code == 0);

  const std::vector<PhaMixLog> logs = read_pha_mix_records(d + "/run/metrics.jsonl");
  REQUIRE(logs.size() == 2);
  REQUIRE(logs[0].step == 2);
  REQUIRE(logs[1].step == 4);
  for (const PhaMixLog& log : logs) {
    REQUIRE(log.rows.size() == 2);
    for (const PhaMixRow& r : log.rows) REQUIRE(r.attn + r.gss + r.ffn == Approx(1.0).epsilon(1e-8));  // records hold 9 digits
  }
  // lr 3e-2 moves the logits off their equal start.
  REQUIRE(logs[1].rows[0].attn != Approx(1.0 / 3).epsilon(1e-6));
  int params = 0;
  std::ifstream in(d + "/run/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] != "probe.param") continue;
    ++params;
    if (j["name"] == "model.layers.0.mixer.attn.logit_scale") REQUIRE(j.contains("mean"));
    if (j["name"] == "model.layers.1.mixer.mix_logits") REQUIRE(j["min"].get<double>() <= j["max"].get<double>());
  }
  REQUIRE(params == 2 * 3);

  const ProcessResult probes = hybrid({"eval", "probes", "--checkpoint", d + "/run", "--window", "2"});
  INFO(probes.output);
  REQUIRE(probes.exit_code == 0);
  CHECK(probes.output.find("from its run's metrics.jsonl") != std::string::npos);
  CHECK(probes.output.find("| L1 |") != std::string::npos);
  CHECK(probes.output.find("window_mean over 2 evaluations") != std::string::npos);

  cfg["eval"]["param_probes"] = {"*.mix_logitz"};
  cfg["train"]["out_dir"] = d + "/run2";
  std::ofstream(d + "/cfg2.json") << cfg.dump();
  const ProcessResult bad = hybrid({"train", "--config", d + "/cfg2.json"});
  REQUIRE(bad.exit_code != 0);
  CHECK(bad.output.find("eval.param_probes[0]: expected a glob that matches a parameter, got \"*.mix_logitz\"") !=
        std::string::npos);
}
