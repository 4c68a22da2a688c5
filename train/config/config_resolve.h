// Resolution of a run config (config.md 3.6 steps 1 to 8): --set phase 1, the layer list and its
// overrides, --set phase 2, data, the model's keys, each layer through its family, train and eval,
// the rules between sections, the files. The first error stops it, as one hyb::Error line in the
// form of config.md 8.2.
//   RunConfig rc = load_run_config("configs/quickstart.json", {"train.steps=10"});
//   std::cout << rc.resolved.dump(2);   // the config.json of a run; rc.sha256 its config_sha256
#pragma once
#include <string>
#include <vector>

#include "train/config/config_assign.h"
#include "train/config/run_config.h"

namespace hyb {

struct ResolveOptions {
  bool require_train = true;  // false: a config without `train` resolves without one (config show)
  int world_size = 1;         // ranks of the job, for the batch_size rule
  int cuda_devices = -1;      // visible GPUs for device "auto"; -1: ask the runtime
  bool check_files = true;    // step 7's glob matches and shard headers
};

// `written` is the config as parsed; `source` names it in errors and gives `name` its default.
RunConfig resolve_run_config(const Json& written, const std::string& source, const std::vector<Assignment>& sets,
                             const ResolveOptions& options = {});

// Reads FILE strictly and resolves it with the --set arguments ("PATH=VALUE").
RunConfig load_run_config(const std::string& file, const std::vector<std::string>& set_args,
                          const ResolveOptions& options = {});

}  // namespace hyb
