// `hybrid bench dp --config FILE [--set PATH=VALUE ...] [--steps N] [--warmup W] [--out FILE]`:
// what data parallelism costs one rank, on random tokens at the config's shapes. Run alone it
// times plain training steps (forward, backward, clip, AdamW); run under `hybrid launch` it also
// times the data-parallel step (the same with the bucketed reduction overlapping backward) and the
// reduction alone, and reports the share of the reduction hidden behind backward:
//   hidden = 1 - (t_dp - t_local) / t_comm.
// With train.data_parallel.zero1 the data-parallel step is ZeRO-1's (reduce-scatter, AdamW on the
// rank's slices, all-gather of the weights; "the reduction alone" is then the reduce-scatter). The
// peak of the caching allocator is reported for the data-parallel and the local steps; NCCL's own
// buffers are outside it. The data-parallel runs go first, so in ZeRO-1 mode the full AdamW state the
// local steps need does not exist yet when their peak is taken.
// A step runs train.grad_accum micro-steps of batch_size / (grad_accum x ranks) sequences per rank
// (config.md 6.2); as in training, only the last micro-step's backward reduces. Weak scaling keeps
// batch_size / ranks fixed (docs/distributed.md).
#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/tape.h"
#include "core/current_device.h"
#include "core/rng.h"
#include "optim/clip.h"
#include "train/cli.h"
#include "train/config/config_resolve.h"
#include "train/distributed/dist_env.h"
#include "train/distributed/grad_sync.h"
#include "train/distributed/zero_adamw.h"
#include "train/model_from_config.h"
#if HYBRID_CUDA
#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_stream.h"
#endif
#if HYBRID_NCCL
#include "train/distributed/nccl_communicator.h"
#endif

namespace hyb {

int cmd_bench_dp(Args& args) {
  const std::string config = args.value("--config");
  const std::vector<std::string> sets = args.values("--set");
  const int64_t steps = args.integer("--steps", 20);
  const int64_t warmup = args.integer("--warmup", 5);
  const std::string out = args.value("--out", "");
  args.finish();
  HYB_CHECK(steps >= 1 && warmup >= 0, "bench dp: --steps must be >= 1 and --warmup >= 0");
#if !HYBRID_CUDA
  (void)config, (void)sets, (void)out;
  throw Error("bench dp: this build has no CUDA backend");
#else
  const DistEnv env = dist_env_from_process();
  RunConfig rc = load_run_config(config, sets);
  TrainConfig& tc = *rc.train;
  HYB_CHECK(tc.device.is_cuda(), "bench dp: train.device must be cuda, got ", tc.device.str());
  tc.device = Device::cuda(env.local_rank);
  make_current(tc.device);
  std::unique_ptr<Communicator> comm;
  if (env.distributed()) {
#if HYBRID_NCCL
    comm = std::make_unique<NcclCommunicator>(env, env.local_rank, comm_timeout_s());
#else
    throw Error("bench dp: this build has no NCCL");
#endif
  }
  const int world = env.world_size;
  const int64_t accum = tc.grad_accum;
  HYB_CHECK(tc.batch_size % (accum * world) == 0, "bench dp: train.batch_size ", tc.batch_size,
            " is not a multiple of grad_accum x ranks (", accum, " x ", world, " = ", accum * world, ")");
  const int64_t b = tc.batch_size / (accum * world), T = rc.data.seq_len;

  std::unique_ptr<CausalLM> model = build_model(rc, tc.device, tc.seed);
  std::vector<OptimParam> params;
  int64_t n_params = 0;
  for (const NamedParameter& p : model->named_parameters()) {
    params.push_back({p.name, p.var, 0.1});
    n_params += p.var.numel();
  }
  std::unique_ptr<GradSync> sync;
  std::unique_ptr<ZeroAdamW> zero;
  std::unique_ptr<AdamW> adamw;  // the local steps' (and the plain data-parallel step's) optimizer
  if (comm) sync = std::make_unique<GradSync>(params, *comm, tc.bucket_mb, tc.zero1);
  if (sync && tc.zero1) zero = std::make_unique<ZeroAdamW>(params, *sync, tc.optimizer.adam);
  else adamw = std::make_unique<AdamW>(params, tc.optimizer.adam);

  RngStream rng(tc.seed + uint64_t(env.rank), "bench.dp.tokens");
  std::vector<int32_t> ids(size_t(b * (T + 1)));
  for (int32_t& t : ids) t = int32_t(rng.below(uint32_t(model->config().real_vocab)));
  const Tensor all = Tensor::from_vector(ids, {b, T + 1}).to(tc.device);
  const Tensor inputs = all.narrow(1, 0, T).contiguous(), targets = all.narrow(1, 1, T).contiguous();

  // Where a step's time goes, on the compute stream's clock: forward + backward (slower with the
  // reduction overlapping it), the wait for the reduction after backward (its exposed tail, with the
  // copies out of the buckets), and clip + AdamW. Summed over the timed steps by `phases`.
  const cudaStream_t compute = current_stream(tc.device.index);
  CudaEvent ev[4] = {CudaEvent(true), CudaEvent(true), CudaEvent(true), CudaEvent(true)};
  double phase_ms[3] = {0, 0, 0};
  bool timing = false;
  auto step = [&](bool reduce) {
    ev[0].record(compute);
    for (int64_t m = 0; m < accum; ++m) {
      Var loss = model->loss(inputs, targets, tc.compute);
      if (reduce && m == accum - 1) sync->arm();
      backward(loss);
    }
    ev[1].record(compute);
    if (reduce) sync->finish();
    ev[2].record(compute);
    if (reduce && zero) {
      zero->clip_grad_norm(tc.grad_clip);
      zero->step(1.0);
    } else {
      clip_grad_norm(params, tc.grad_clip);
      adamw->step(1.0);
    }
    for (const OptimParam& p : params) p.var.zero_grad();
    ev[3].record(compute);
    if (timing) {
      ev[3].synchronize();
      for (int i = 0; i < 3; ++i) phase_ms[i] += ev[i].elapsed_ms(ev[i + 1]);
    }
  };
  auto comm_only = [&] {
    sync->arm();
    sync->finish();
  };
  auto barrier = [&] {
    if (comm) comm->all_reduce_host(0.0, ReduceOp::sum, tc.device);
  };
  auto time_ms = [&](const std::function<void()>& f) {
    for (int64_t i = 0; i < warmup; ++i) f();
    barrier();
    cuda_synchronize(tc.device.index);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < steps; ++i) f();
    cuda_synchronize(tc.device.index);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / double(steps);
  };

  // The phases are timed in a separate pass: the event synchronisation of each step would stall the
  // host's run-ahead that the step times above include.
  auto phases = [&](bool reduce) {
    for (double& p : phase_ms) p = 0;
    barrier();
    timing = true;
    for (int64_t i = 0; i < steps; ++i) step(reduce);
    timing = false;
    return nlohmann::json{{"fwd_bwd_ms", phase_ms[0] / double(steps)}, {"reduce_wait_ms", phase_ms[1] / double(steps)},
                          {"clip_adamw_ms", phase_ms[2] / double(steps)}};
  };
  // Each section is announced with the time (stderr), to line it up with clock and power samples
  // (tools/device_dp_tune.sh, DP_CLOCKS=1).
  auto section = [&](const char* what) {
    if (env.rank == 0) spdlog::info("bench dp: {}", what);
  };
  auto peak_mib = [&] { return double(cuda_allocator_stats(tc.device.index).peak_allocated_bytes) / (1 << 20); };
  nlohmann::json r = {{"ranks", world}, {"params", n_params}, {"batch_per_rank", b}, {"grad_accum", accum}, {"seq_len", T},
                      {"precision", tc.precision}, {"bucket_mb", tc.bucket_mb}, {"zero1", bool(zero)}};
  double dp_ms = 0, comm_ms = 0;
  if (sync) {
    section("data-parallel steps");
    cuda_reset_peak_stats(tc.device.index);
    dp_ms = time_ms([&] { step(true); });
    r["dp_peak_allocated_mib"] = peak_mib();
    section("the reduction alone");
    comm_ms = time_ms(comm_only);
    r["dp_step_ms"] = dp_ms;
    r["comm_only_ms"] = comm_ms;
    r["dp_tokens_per_s_per_gpu"] = double(accum * b * T) / (dp_ms * 1e-3);
    r["buckets"] = sync->buckets().size();
    section("phases of data-parallel steps");
    r["phases_dp"] = phases(true);
  }
  if (!adamw) adamw = std::make_unique<AdamW>(params, tc.optimizer.adam);
  section("local steps");
  cuda_reset_peak_stats(tc.device.index);
  const double local_ms = time_ms([&] { step(false); });
  r["local_peak_allocated_mib"] = peak_mib();
  r["local_step_ms"] = local_ms;
  r["local_tokens_per_s_per_gpu"] = double(accum * b * T) / (local_ms * 1e-3);
  if (sync) {
    r["efficiency_vs_local"] = local_ms / dp_ms;
    r["hidden_fraction"] = 1.0 - (dp_ms - local_ms) / comm_ms;
  }
  section("phases of local steps");
  r["phases_local"] = phases(false);
  section("done");
  if (env.rank == 0) {
    std::printf("%s\n", r.dump().c_str());
    if (!out.empty()) std::ofstream(out) << r.dump(2) << "\n";
  }
  return 0;
#endif
}

}  // namespace hyb
