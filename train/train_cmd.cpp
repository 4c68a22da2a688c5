// `hybrid train --config FILE [--set PATH=VALUE ...] [--resume DIR]`. The config is resolved
// (config.md 3.6) and train_run does the rest; with --resume the newest complete checkpoint under
// DIR (or DIR itself, when it is one) restores weights, optimizer, data cursor and schedule, and
// the resolved config must hash as the checkpoint's did. A process whose environment names a rank
// of several (hybrid launch, srun, mpirun: train/distributed/dist_env.h) trains data parallel: over
// NCCL on GPU LOCAL_RANK, or over TCP between CPU processes when train.device is cpu.
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include "train/checkpoint.h"
#include "train/checkpoint_model.h"
#include "train/cli.h"
#include "train/config/config_resolve.h"
#include "train/distributed/dist_env.h"
#include "train/distributed/tcp_communicator.h"
#include "train/train_run.h"
#if HYBRID_NCCL
#include "train/distributed/nccl_communicator.h"
#endif

namespace hyb {

namespace fs = std::filesystem;

int cmd_train(Args& args) {
  auto config = args.get("--config");
  auto resume = args.get("--resume");
  std::vector<std::string> sets = args.values("--set");
  args.finish();
  const DistEnv env = dist_env_from_process();
  std::string ckpt;
  if (resume) ckpt = resolve_checkpoint_dir(*resume);
  HYB_CHECK(config || resume, "train: give --config FILE (or --resume DIR to continue a run from its own config)");
  RunConfig rc = load_run_config(config ? *config : ckpt + "/config.json", sets);
  TrainConfig& tc = *rc.train;
  HYB_CHECK(resume || list_checkpoints((fs::path(tc.out_dir) / "ckpt").string()).empty(), "train: ", tc.out_dir,
            " already holds checkpoints of a run; continue it with --resume ", tc.out_dir,
            ", or set train.out_dir (or name) to start another");

  std::unique_ptr<Communicator> comm;
  if (env.distributed() && tc.device.is_cpu()) {
    comm = std::make_unique<TcpCommunicator>(env, comm_timeout_s());
  } else if (env.distributed()) {
#if HYBRID_NCCL
    tc.device = Device::cuda(env.local_rank);
    comm = std::make_unique<NcclCommunicator>(env, env.local_rank, comm_timeout_s());
#else
    throw Error(str_cat("train: rank ", env.rank, " of ", env.world_size,
                        ": this build has no NCCL for data parallelism on GPUs (see docs/distributed.md)"));
#endif
  }
  if (env.rank != 0) spdlog::set_level(spdlog::level::warn);
  const TrainRunResult r = train_run(rc, ckpt, comm.get());
  if (env.rank != 0) return 0;
  if (r.validated) {
    std::printf("final val_loss %.4f (ppl %.2f) after %lld steps\n", r.last_val_loss, std::exp(r.last_val_loss),
                static_cast<long long>(r.steps));
  } else {
    std::printf("final train loss %.4f after %lld steps\n", r.last_loss, static_cast<long long>(r.steps));
  }
  return 0;
}

}  // namespace hyb
