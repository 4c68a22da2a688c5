// NHA's randomised windows in training (nha.md 8.1, train.window_randomization): with p_full = 1
// every training forward uses unlimited windows (the same losses as a model configured so), with 0
// the configured ones, in between a deterministic mixture that a resumed run continues exactly;
// validation always uses the configured windows.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/run_util.h"
#include "train/checkpoint.h"
#include "train/config/config_resolve.h"
#include "train/train_run.h"

using namespace hyb;
namespace fs = std::filesystem;

namespace {

std::string setup_dir() {
  const fs::path d = tiny_run_dir("window_randomization", "sliding windows", 17);
  nlohmann::json cfg = {
      {"model", {{"d_model", 32}, {"num_layers", 3},
                 {"block", {{"mixer", {{"type", "nha"}, {"num_heads", 2}, {"num_kv_heads", 2}, {"head_dim", 16}, {"value_head_dim", 16},
                                       {"slots", 4}, {"window", 3}}}}}}},
      {"data", {{"tokenizer", "byte"}, {"train", (d / "train.bin").string()}, {"val", (d / "val.bin").string()},
                {"seq_len", 24}}},
      {"train", {{"device", "cpu"}, {"batch_size", 4}, {"steps", 6}, {"log_interval", 1}, {"eval_interval", 3},
                 {"checkpoint_interval", 3}, {"keep_last", 5}, {"optimizer", {{"lr", 3e-3}}},
                 {"schedule", {{"warmup_steps", 2}}}}},
      {"eval", {{"max_windows", 6}}}};
  std::ofstream((d / "cfg.json").string()) << cfg.dump(2);
  return d.string();
}


std::vector<double> train(const std::string& d, const std::string& name, std::vector<std::string> sets,
                          const std::string& resume = "") {
  sets.push_back("train.out_dir=\"" + d + "/" + name + "\"");
  train_run(load_run_config(d + "/cfg.json", sets), resume, nullptr);
  return metric(d + "/" + name + "/metrics.jsonl", "train");
}

}  // namespace

TEST_CASE("window randomisation: p_full 1 trains as unlimited windows, 0 as the configured ones, validation keeps them",
          "[train][nha]") {
  const std::string d = setup_dir();
  const auto plain = train(d, "plain", {});
  const auto never = train(d, "never", {"train.window_randomization.p_full=0"});
  const auto always = train(d, "always", {"train.window_randomization.p_full=1"});
  const auto full = train(d, "full", {"model.block.mixer.window=-1"});
  REQUIRE(plain.size() == 6);
  REQUIRE(never == plain);
  REQUIRE(always == full);
  REQUIRE(always != plain);  // the window matters at seq_len 24 with a 3-token window
  // Validation of the p_full = 1 run uses the configured 3-token windows: its first validation is
  // the plain model's validation of the same weights, so it differs from the full-window run's.
  REQUIRE(metric(d + "/always/metrics.jsonl", "ppl") != metric(d + "/full/metrics.jsonl", "ppl"));
}

TEST_CASE("window randomisation: p_full 0.5 mixes the two, deterministically, and a resumed run continues it exactly",
          "[train][nha]") {
  const std::string d = setup_dir();
  const auto plain = train(d, "plain", {});
  const auto full = train(d, "full", {"model.block.mixer.window=-1"});
  const auto half = train(d, "half", {"train.window_randomization.p_full=0.5"});
  REQUIRE(half == train(d, "half_again", {"train.window_randomization.p_full=0.5"}));
  REQUIRE(half != plain);
  REQUIRE(half != full);
  const auto resumed = train(d, "half_resumed", {"train.window_randomization.p_full=0.5"},
                             d + "/half/ckpt/" + checkpoint_name(3));
  REQUIRE(resumed == std::vector<double>(half.begin() + 3, half.end()));
}

TEST_CASE("window randomisation is refused with a learned position bias, which covers only the configured window",
          "[train][nha][config]") {
  const std::string d = setup_dir();
  REQUIRE_THROWS_WITH(load_run_config(d + "/cfg.json", {"train.window_randomization.p_full=0.5",
                                                         "model.block.mixer.pos_enc=\"learned_short\""}),
                      Catch::Contains("train.window_randomization: cannot be used here: model.layers[0] has pos_enc \"learned_short\""));
}
