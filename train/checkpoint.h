// Checkpoints (config.md 9): OUT/ckpt/step_0000500/ holding config.json, model.safetensors,
// optimizer.safetensors and trainer_state.json. A checkpoint is written into step_XXXXXXX.tmp/,
// every file flushed, the directory renamed when complete, then all but the newest keep_last
// are deleted. So a crash (even SIGKILL) mid-write leaves only a .tmp directory, which readers
// ignore and the next save removes. Loading checks that config.json still hashes to the
// config_sha256 recorded in trainer_state.json and in the weights' metadata.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "layers/module.h"
#include "optim/adamw.h"

namespace hyb {

struct CheckpointContents {
  std::string config_text;       // the resolved config as written (2-space JSON)
  std::string config_sha256;
  int64_t step = 0;
  nlohmann::json trainer_state;  // step, config_sha256, data cursor, RNG and schedule state, ...
};

std::string checkpoint_name(int64_t step);  // "step_0000500"

// Writes ckpt_root/step_XXXXXXX and prunes to keep_last. Returns the directory written.
std::string save_checkpoint(const std::string& ckpt_root, const CheckpointContents& c, const Module& model,
                            const AdamWState* optimizer, int keep_last);

struct LoadedCheckpoint {
  std::string dir;
  std::string config_text;
  nlohmann::json trainer_state;
  std::string config_sha256;
  int64_t step = 0;
};

// Reads and cross-checks the small files; tensors are read by the two loaders below.
LoadedCheckpoint load_checkpoint(const std::string& dir);
// Complete checkpoints under ckpt_root, oldest first (step_* directories with trainer_state.json).
std::vector<std::string> list_checkpoints(const std::string& ckpt_root);
std::optional<std::string> latest_checkpoint(const std::string& ckpt_root);

// Copies weights by name and shape into the model's parameters; a missing, extra or misshapen
// tensor is an error naming the file and the tensor.
void load_model_weights(const Module& model, const std::string& path);
AdamWState read_optimizer_state(const std::string& path);

}  // namespace hyb
