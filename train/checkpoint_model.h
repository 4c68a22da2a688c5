// A checkpoint as a usable model (config.md 4.4, 9): its config.json checked against the recorded
// config_sha256, the --set assignments applied and the config resolved again, the model built on
// this machine's device and the weights loaded by name and shape.
//   LoadedModel lm = load_model_from_checkpoint("runs/q/ckpt/step_0000300", {"model.layers[3].mixer.window=64"});
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/model/causal_lm.h"
#include "train/config/run_config.h"

namespace hyb {

struct LoadedModel {
  std::string checkpoint_dir;
  int64_t step = 0;
  RunConfig config;  // after the assignments
  std::unique_ptr<CausalLM> model;
  Device device;
  DType compute;
};

// DIR is a checkpoint or a run directory (its newest checkpoint).
// check_files: resolve the data section's shard files too (evaluation on the config's split).
LoadedModel load_model_from_checkpoint(const std::string& dir, const std::vector<std::string>& sets,
                                       bool check_files = false);
std::string resolve_checkpoint_dir(const std::string& dir);

}  // namespace hyb
