// A small layout model with the blocks T, M and X of intra_hybrid.md 2.1 on the CPU: it resolves
// (X derives its sizes from T and M, the preset is written out), trains a few steps with a falling
// loss, and its checkpoint decodes greedily through the layers' decode states as `hybrid generate`
// does, to the tokens the parallel forward picks.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "eval/sampling.h"
#include "train/checkpoint.h"
#include "train/checkpoint_model.h"
#include "train/config/config_resolve.h"
#include "train/run_util.h"
#include "train/train_run.h"

using namespace hyb;

TEST_CASE("a layout model of T, M and X blocks resolves, trains on the cpu and decodes from its checkpoint",
          "[head_split][train][cpu]") {
  const std::string d = tiny_run_dir("head_split_train", "intra-layer hybrids split the heads. ", 23);
  const nlohmann::json cfg = nlohmann::json::parse(R"({
    "model": {"d_model": 32, "init": "gpt2", "block": {"mlp": {"type": "swiglu", "intermediate_size": 64}},
      "blocks": {"T": {"mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8}},
                 "M": {"mixer": {"type": "mamba2", "d_ssm": 64, "headdim": 16, "d_state": 8}},
                 "X": {"mixer": {"type": "head_split", "preset": "group_diff2"}},
                 "H": {"mixer": {"type": "head_split", "preset": "hymba"}}},
      "layout": {"pattern": "MXTH"}},
    "data": {"tokenizer": "byte", "seq_len": 24},
    "train": {"device": "cpu", "batch_size": 4, "steps": 8, "log_interval": 1, "checkpoint_interval": 8,
              "optimizer": {"lr": 3e-3}}})");
  nlohmann::json with_paths = cfg;
  with_paths["data"]["train"] = d + "/train.bin";
  with_paths["data"]["val"] = d + "/val.bin";
  with_paths["train"]["out_dir"] = d + "/run";
  std::ofstream(d + "/cfg.json") << with_paths.dump(2);

  const RunConfig rc = load_run_config(d + "/cfg.json", {});
  REQUIRE(rc.layout_codes == std::vector<std::string>{"M", "X", "T", "H"});
  const Json& layers = rc.resolved["model"]["layers"];
  for (int i : {1, 3}) {
    const Json& x = layers[size_t(i)]["mixer"];
    REQUIRE(x["type"] == "head_split");
    REQUIRE(x["preset"].is_null());
    REQUIRE(x["attn"]["num_heads"] == 2);
    REQUIRE(x["attn"]["v_head_dim"] == 16);
    REQUIRE(x["ssm"]["d_ssm"] == 32);
  }
  REQUIRE(layers[3]["mixer"]["out_proj"] == 1);

  train_run(rc, "", nullptr);
  const std::vector<double> losses = metric(d + "/run/metrics.jsonl", "train");
  REQUIRE(losses.size() == 8);
  for (double l : losses) REQUIRE(std::isfinite(l));
  REQUIRE(losses.back() < losses.front());

  LoadedModel lm = load_model_from_checkpoint(d + "/run/ckpt/" + checkpoint_name(8), {});
  bool found = false;
  for (const auto& p : lm.model->named_parameters()) found = found || p.name == "model.layers.1.mixer.ssm.out_proj.weight";
  REQUIRE(found);
  NoGradGuard no_grad;
  lm.model->set_training(false);
  std::vector<int32_t> ids = {'i', 'n', 't', 'r', 'a'};
  const std::vector<int32_t> decoded = greedy_decode(*lm.model, {ids}, 5, lm.device, lm.compute)[0];
  for (int32_t want : decoded) {
    const Tensor logits = lm.model->logits(Tensor::from_vector<int32_t>(ids, {1, int64_t(ids.size())}), lm.compute).data();
    const std::vector<double> last = logits.select(0, logits.size(0) - 1).to_double_vector();
    REQUIRE(greedy_token(last, lm.model->config().real_vocab) == want);
    ids.push_back(want);
  }
}
