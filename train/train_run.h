// One rank's whole training run from a resolved config: the model built and initialised from the
// run's seed, this rank's share of the data, validation on this rank's share of the windows, and
// the Trainer. `hybrid train` calls it once per process (with an NCCL communicator when launched
// data parallel); the data-parallel tests call it once per thread with a ThreadCommunicator.
//   TrainRunResult r = train_run(rc, /*resume_dir=*/"", /*comm=*/nullptr);
#pragma once
#include <string>

#include "train/config/run_config.h"
#include "train/distributed/communicator.h"

namespace hyb {

struct TrainRunResult {
  int64_t steps = 0;
  double last_loss = 0, last_val_loss = 0;
  bool validated = false;
};

// resume_dir: a complete checkpoint directory, or "" for a fresh run. comm: null for one rank.
TrainRunResult train_run(const RunConfig& rc, const std::string& resume_dir, Communicator* comm);

}  // namespace hyb
