// The train section (config.md 6): its keys and step 7's derived values: the device and precision
// this machine runs with, steps from a token budget, the schedule's lengths, and out_dir.
//   Json train = resolve_train_section(cfg["train"], {.name = "quickstart", .seq_len = 128, ...});
#pragma once
#include <string>

#include "core/config_table.h"

namespace hyb {

extern const KeyTable kTrainKeys;
extern const KeyTable kOptimizerKeys;
extern const KeyTable kDataParallelKeys;
extern const KeyTable kWindowRandomizationKeys;

struct TrainContext {
  std::string name;      // the run's name, for out_dir's default
  int64_t seq_len = 1;   // data.seq_len
  bool mqar = false;     // data.task is "mqar": budgets in steps only
  int world_size = 1;    // ranks of the job (1 where no launcher says otherwise)
  int cuda_devices = 0;  // visible GPUs, for device "auto"
};

// Errors are ConfigKeyError under "train".
Json resolve_train_section(const Json& train, const TrainContext& ctx);

}  // namespace hyb
