// NCCL on one GPU as a job of one rank: the collectives' stream and event handling, and the whole
// data-parallel training path (GradSync's buckets on the comm stream, ZeRO-1's slices and
// all-gather) against the same run without a communicator. Several GPUs are tools/device_dp.sh's.
#include <catch2/catch.hpp>

#if HYBRID_NCCL
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compare.h"
#include "core/device.h"
#include "train/run_util.h"
#include "train/config/config_resolve.h"
#include "train/distributed/nccl_communicator.h"
#include "train/train_run.h"

using namespace hyb;
namespace fs = std::filesystem;

namespace {

DistEnv one_rank() {
  DistEnv e;
  e.world_size = 1;
  return e;
}

Tensor ramp(int64_t n, double base) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(float(base + 0.25 * double(i) - 1.5));
  return Tensor::from_vector(v, {n}).to(Device::cuda(0));
}


}  // namespace

TEST_CASE("NCCL with one rank: collectives on the comm stream meet the compute stream", "[gpu][distributed]") {
  NcclCommunicator comm(one_rank(), 0, 60);
  Tensor a = ramp(1000, 0.5);
  const std::vector<double> want = a.to_double_vector();
  comm.after_compute();
  comm.all_reduce(a, ReduceOp::mean);
  Tensor mine = a.narrow(0, 0, 1000);
  comm.reduce_scatter(a, mine, ReduceOp::sum);
  Tensor gathered = Tensor::zeros({1000}, DType::f32, Device::cuda(0));
  comm.all_gather(a, gathered);
  comm.broadcast(gathered, 0);
  comm.before_compute();
  REQUIRE(gathered.to_double_vector() == want);
  REQUIRE(comm.all_reduce_host({2.5, -1.0}, ReduceOp::max, Device::cuda(0)) == std::vector<double>{2.5, -1.0});
}

TEST_CASE("NCCL with one rank: the data-parallel training path equals the plain one on the GPU", "[gpu][distributed][train]") {
  const fs::path d = tiny_run_dir("nccl_one_rank", "one rank", 13, 8000);
  nlohmann::json cfg = {
      {"model", {{"d_model", 64}, {"num_layers", 2}, {"block", {{"mixer", {{"type", "attention"}, {"num_heads", 2}}}}}}},
      {"data", {{"tokenizer", "byte"}, {"train", (d / "train.bin").string()}, {"val", (d / "val.bin").string()},
                {"seq_len", 32}}},
      {"train", {{"device", "cuda"}, {"precision", "fp32"}, {"batch_size", 8}, {"grad_accum", 2}, {"steps", 5},
                 {"log_interval", 1}, {"optimizer", {{"lr", 3e-3}}}, {"schedule", {{"warmup_steps", 2}}}}},
      {"eval", {{"max_windows", 8}}}};
  std::ofstream((d / "cfg.json").string()) << cfg.dump(2);
  auto config = [&](const std::string& name, bool zero1) {
    return load_run_config((d / "cfg.json").string(), {"train.out_dir=\"" + (d / name).string() + "\"",
                                                       std::string("train.data_parallel.zero1=") + (zero1 ? "true" : "false"),
                                                       "train.data_parallel.bucket_mb=0.01"});
  };
  train_run(config("plain", false), "", nullptr);
  for (bool zero1 : {false, true}) {
    INFO("zero1 " << zero1);
    NcclCommunicator comm(one_rank(), 0, 60);
    const std::string name = zero1 ? "zero" : "dp";
    train_run(config(name, zero1), "", &comm);
    for (const char* field : {"loss", "grad_norm"}) {
      const auto want = metric((d / "plain" / "metrics.jsonl").string(), "train", field);
      const auto got = metric((d / name / "metrics.jsonl").string(), "train", field);
      REQUIRE(want.size() == 5);
      REQUIRE(max_rel_error(got, want) < 1e-5);
    }
  }
}
#endif
