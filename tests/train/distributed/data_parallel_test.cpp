// Data parallelism on the CPU through the thread communicator: the bucketed reduction and ZeRO-1
// code that NCCL runs on GPUs. N ranks with b sequences each train the same model as 1 rank with
// N b (same config batch_size, which counts the whole job), with and without ZeRO-1, with gradient
// accumulation and with buckets small enough to cut parameters across rank slices; a ZeRO-1
// checkpoint resumes on another number of ranks and continues as the uninterrupted run does.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "compare.h"
#include "core/safetensors.h"
#include "train/run_util.h"
#include "train/config/config_resolve.h"
#include "train/distributed/thread_communicator.h"
#include "train/train_run.h"

using namespace hyb;
namespace fs = std::filesystem;

namespace {

std::string setup_dir() {
  const fs::path d = tiny_run_dir("data_parallel", "data parallel", 11, 8000, 700);
  nlohmann::json cfg = {
      {"model", {{"d_model", 32}, {"num_layers", 2},
                 {"block", {{"mixer", {{"type", "attention"}, {"num_heads", 2}, {"window", 8}}}}}}},
      {"data", {{"tokenizer", "byte"}, {"train", (d / "train.bin").string()}, {"val", (d / "val.bin").string()},
                {"seq_len", 16}}},
      {"train", {{"batch_size", 12}, {"steps", 6}, {"log_interval", 1}, {"eval_interval", 3},
                 {"checkpoint_interval", 3}, {"keep_last", 5}, {"optimizer", {{"lr", 3e-3}}},
                 {"schedule", {{"warmup_steps", 2}}}}},
      {"eval", {{"max_windows", 9}}}};
  std::ofstream((d / "cfg.json").string()) << cfg.dump(2);
  return d.string();
}

struct Run {
  int ranks = 1;
  int64_t grad_accum = 1;
  bool zero1 = false;
  double bucket_mb = 25;
  std::string resume;  // checkpoint directory or ""
};

// Trains `run` on threads; returns rank 0's result (every rank returns the same losses).
TrainRunResult train_on_threads(const std::string& dir, const std::string& name, const Run& run) {
  RunConfig rc = load_run_config(dir + "/cfg.json",
                                 {"train.device=\"cpu\"", "train.out_dir=\"" + dir + "/" + name + "\"", "train.grad_accum=" + std::to_string(run.grad_accum),
                                  std::string("train.data_parallel.zero1=") + (run.zero1 ? "true" : "false"),
                                  "train.data_parallel.bucket_mb=" + std::to_string(run.bucket_mb)});
  if (run.ranks == 1) return train_run(rc, run.resume, nullptr);
  ThreadGroup group(run.ranks);
  std::vector<TrainRunResult> results(size_t(run.ranks));
  std::vector<std::exception_ptr> errors(size_t(run.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < run.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(group, r);
        results[size_t(r)] = train_run(rc, run.resume, &comm);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (const auto& res : results) REQUIRE(res.last_loss == results[0].last_loss);
  return results[0];
}


// Every tensor of two safetensors files within a relative (norm-wise) tolerance.
void require_close_files(const std::string& a, const std::string& b, double tol) {
  SafetensorsFile fa = load_safetensors(a), fb = load_safetensors(b);
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (const auto& [name, t] : fa.tensors) {
    INFO(a << " vs " << b << ": " << name);
    REQUIRE(rel_error(fb.get(name), t) < tol);
  }
}

void require_close(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  REQUIRE(a.size() == b.size());
  REQUIRE(max_rel_error(a, b) < tol);
}

}  // namespace

TEST_CASE("3 ranks with 4 sequences each train as 1 rank with 12, plain and ZeRO-1, with accumulation and small buckets",
          "[distributed][train]") {
  const std::string d = setup_dir();
  const TrainRunResult one = train_on_threads(d, "one", {.ranks = 1, .grad_accum = 1});
  // 0.002 MiB buckets hold ~500 floats: parameters are cut across buckets' rank slices.
  const TrainRunResult plain = train_on_threads(d, "plain", {.ranks = 3, .grad_accum = 2, .bucket_mb = 0.002});
  const TrainRunResult zero = train_on_threads(d, "zero", {.ranks = 3, .grad_accum = 2, .zero1 = true, .bucket_mb = 0.002});
  REQUIRE(one.steps == 6);
  REQUIRE(plain.steps == 6);
  REQUIRE(zero.steps == 6);

  const std::vector<double> ref = metric(d + "/one/metrics.jsonl", "train");
  REQUIRE(ref.size() == 6);
  REQUIRE(ref.back() < ref.front());  // it learns, so equality below is about a moving model
  for (const char* run : {"plain", "zero"}) {
    INFO(run);
    require_close(metric(d + "/" + run + "/metrics.jsonl", "train"), ref, 2e-5);
    require_close(metric(d + "/" + run + "/metrics.jsonl", "ppl"), metric(d + "/one/metrics.jsonl", "ppl"), 2e-5);
    // AdamW is blind to a gradient's scale; the norm is not, so a sum where a mean belongs shows here.
    require_close(metric(d + "/" + run + "/metrics.jsonl", "train", "grad_norm"),
                  metric(d + "/one/metrics.jsonl", "train", "grad_norm"), 2e-5);
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      require_close_files(d + "/one/ckpt/step_0000006/" + file, d + "/" + run + "/ckpt/step_0000006/" + file, 1e-4);
  }
  // Only rank 0 writes: one record per step, not one per rank.
  REQUIRE(metric(d + "/zero/metrics.jsonl", "train").size() == 6);
}

TEST_CASE("a ZeRO-1 checkpoint of 2 ranks resumes on 3 ranks (and on 1) and continues as the uninterrupted run",
          "[distributed][train]") {
  const std::string d = setup_dir();
  train_on_threads(d, "straight", {.ranks = 2, .zero1 = true, .bucket_mb = 0.002});
  const std::string ckpt3 = d + "/straight/ckpt/step_0000003";
  REQUIRE(fs::exists(ckpt3 + "/optimizer.safetensors"));
  // The checkpoint holds the full optimizer state: every parameter's m and v, whole.
  const SafetensorsFile opt = load_safetensors(ckpt3 + "/optimizer.safetensors");
  const SafetensorsFile weights = load_safetensors(ckpt3 + "/model.safetensors");
  REQUIRE(opt.tensors.size() == 2 * weights.tensors.size());

  for (auto [name, ranks] : {std::pair{"on3", 3}, std::pair{"on1", 1}}) {
    INFO(name);
    fs::create_directories(d + "/" + name);
    const TrainRunResult r = train_on_threads(d, name, {.ranks = ranks, .zero1 = ranks > 1, .bucket_mb = 0.002, .resume = ckpt3});
    REQUIRE(r.steps == 6);
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      require_close_files(d + "/straight/ckpt/step_0000006/" + file, d + "/" + name + "/ckpt/step_0000006/" + file, 1e-4);
    const std::vector<double> straight = metric(d + "/straight/metrics.jsonl", "train");
    const std::vector<double> resumed = metric(d + "/" + name + "/metrics.jsonl", "train");
    REQUIRE(resumed.size() == 3);
    require_close(resumed, std::vector<double>(straight.end() - 3, straight.end()), 2e-5);
  }
}
