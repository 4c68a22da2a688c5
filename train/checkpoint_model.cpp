#include "train/checkpoint_model.h"

#include <filesystem>

#include "core/current_device.h"
#include "core/sha256.h"
#include "train/checkpoint.h"
#include "train/config/config_hash.h"
#include "train/config/config_json.h"
#include "train/config/config_resolve.h"
#include "train/model_from_config.h"

namespace hyb {

namespace fs = std::filesystem;

std::string resolve_checkpoint_dir(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "trainer_state.json")) return dir;
  auto latest = latest_checkpoint((fs::path(dir) / "ckpt").string());
  if (!latest) latest = latest_checkpoint(dir);
  HYB_CHECK(latest, dir, ": no complete checkpoint here or under ", (fs::path(dir) / "ckpt").string());
  return *latest;
}

LoadedModel load_model_from_checkpoint(const std::string& dir0, const std::vector<std::string>& sets, bool check_files) {
  LoadedModel lm;
  lm.checkpoint_dir = resolve_checkpoint_dir(dir0);
  LoadedCheckpoint ck = load_checkpoint(lm.checkpoint_dir);
  lm.step = ck.step;
  const std::string cfg_path = lm.checkpoint_dir + "/config.json";
  // The stored config must be the one the weights were trained with (config.md 9).
  const std::string stored = config_sha256(parse_config_json(ck.config_text, cfg_path));
  HYB_CHECK(stored == ck.config_sha256, cfg_path, ": config_sha256: expected ", ck.config_sha256.substr(0, 8),
            "... (trainer_state.json), got ", stored.substr(0, 8),
            "... (the file was changed after the checkpoint was written; use --set)");
  ResolveOptions opt;
  opt.require_train = false;
  opt.check_files = check_files;
  // A command that reads a checkpoint computes where it runs (config.md 6.1, eval.md 0): the device
  // and precision resolve for this machine, before the user's own assignments.
  std::vector<std::string> all_sets{"train.device=\"auto\"", "train.precision=\"auto\""};
  all_sets.insert(all_sets.end(), sets.begin(), sets.end());
  lm.config = load_run_config(cfg_path, all_sets, opt);
  lm.device = lm.config.train ? lm.config.train->device : Device::cpu();
  lm.compute = lm.config.train ? lm.config.train->compute : DType::f32;
  make_current(lm.device);
  lm.model = build_model(lm.config, lm.device, 0);
  load_model_weights(*lm.model, lm.checkpoint_dir + "/model.safetensors");
  return lm;
}

}  // namespace hyb
