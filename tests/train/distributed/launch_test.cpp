// The multi-process path end to end on the CPU (ranks talk over TCP): `hybrid launch` with two
// ranks trains as one process does, so do two launchers of one "node" each meeting over loopback;
// a rank killed mid-run ends the job with an error instead of a hang, whether its peer is under the
// same launcher or another; a rank that never reaches rank 0 gives up at the rendezvous timeout.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "compare.h"
#include "train/run_util.h"
#include "process.h"

using namespace hyb;
namespace fs = std::filesystem;

namespace {

std::string setup_dir() {
  const fs::path d = tiny_run_dir("launch", "two processes", 19);
  nlohmann::json cfg = {
      {"model", {{"d_model", 32}, {"num_layers", 2}, {"block", {{"mixer", {{"type", "attention"}, {"num_heads", 2}}}}}}},
      {"data", {{"tokenizer", "byte"}, {"train", (d / "train.bin").string()}, {"val", (d / "val.bin").string()},
                {"seq_len", 16}}},
      {"train", {{"device", "cpu"}, {"batch_size", 8}, {"steps", 6}, {"log_interval", 1}, {"eval_interval", 3},
                 {"checkpoint_interval", 3}, {"optimizer", {{"lr", 3e-3}}}, {"schedule", {{"warmup_steps", 2}}},
                 {"data_parallel", {{"bucket_mb", 0.01}}}}},
      {"eval", {{"max_windows", 8}}}};
  std::ofstream((d / "cfg.json").string()) << cfg.dump(2);
  return d.string();
}

int port(int k) { return 21000 + int(::getpid() % 15000) + k; }

std::vector<std::string> hybrid(std::vector<std::string> args) {
  args.insert(args.begin(), HYBRID_BINARY);
  return args;
}

std::vector<std::string> train_args(const std::string& d, const std::string& out) {
  return {"train", "--config", d + "/cfg.json", "--set", "train.out_dir=\"" + d + "/" + out + "\""};
}

std::vector<std::string> launch(int nnodes, int node_rank, int nproc, int p, const std::vector<std::string>& cmd) {
  std::vector<std::string> a{"launch", "--nnodes", std::to_string(nnodes), "--node-rank", std::to_string(node_rank),
                             "--nproc-per-node", std::to_string(nproc), "--master-port", std::to_string(p), "--"};
  a.insert(a.end(), cmd.begin(), cmd.end());
  return hybrid(a);
}


void require_same_run(const std::string& d, const std::string& run) {
  for (auto [kind, field] : {std::pair{"train", "loss"}, std::pair{"train", "grad_norm"}, std::pair{"ppl", "loss"}}) {
    INFO(run << " " << kind << "." << field);
    const auto want = metric(d + "/one/metrics.jsonl", kind, field), got = metric(d + "/" + run + "/metrics.jsonl", kind, field);
    REQUIRE(!want.empty());
    REQUIRE(max_rel_error(got, want) < 2e-5);
  }
}

// Two launchers of one node each, started together; returns their results.
std::pair<ProcessResult, ProcessResult> two_nodes(int p, const std::vector<std::string>& cmd,
                                                  const std::vector<std::string>& env0, const std::vector<std::string>& env1) {
  ProcessResult r0, r1;
  std::thread t0([&] { r0 = run_process(launch(2, 0, 1, p, cmd), env0); });
  std::thread t1([&] { r1 = run_process(launch(2, 1, 1, p, cmd), env1); });
  t0.join();
  t1.join();
  return {r0, r1};
}

}  // namespace

TEST_CASE("hybrid launch: two CPU ranks train as one process, under one launcher or as two nodes", "[distributed][launch]") {
  const std::string d = setup_dir();
  ProcessResult one = run_process(hybrid(train_args(d, "one")));
  INFO(one.output);
  REQUIRE(one.exit_code == 0);

  ProcessResult two = run_process(launch(1, 0, 2, port(0), train_args(d, "two")));
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  require_same_run(d, "two");
  REQUIRE(metric(d + "/two/metrics.jsonl", "train", "loss").size() == 6);  // rank 0 alone writes

  auto [n0, n1] = two_nodes(port(1), train_args(d, "nodes"), {}, {});
  INFO(n0.output << n1.output);
  REQUIRE(n0.exit_code == 0);
  REQUIRE(n1.exit_code == 0);
  require_same_run(d, "nodes");
}

TEST_CASE("hybrid launch: a rank killed mid-run ends the job with an error, not a hang", "[distributed][launch]") {
  const std::string d = setup_dir();
  // Rank 0 alone writes checkpoints, so only it passes this point: SIGKILL after the step-3 checkpoint.
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = run_process(launch(1, 0, 2, port(2), train_args(d, "killed")), std::vector<std::string>{"HYBRID_FAULT=checkpoint.written:1"});
  INFO(r.output);
  REQUIRE(r.exit_code == 128 + 9);
  REQUIRE_THAT(r.output, Catch::Contains("launch: rank 0 was killed by signal 9"));
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));

  // Across launchers no one tears the survivor down: it notices the closed connection itself.
  auto [n0, n1] = two_nodes(port(3), train_args(d, "killed_nodes"), {"HYBRID_FAULT=checkpoint.written:1"},
                            {"HYBRID_COMM_TIMEOUT=60"});
  INFO(n0.output << n1.output);
  REQUIRE(n0.exit_code == 128 + 9);
  REQUIRE(n1.exit_code == 2);
  REQUIRE_THAT(n1.output, Catch::Contains("data parallel: rank 1 of 2: ") && Catch::Contains("rank 0"));
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
}

TEST_CASE("hybrid launch: a rank that cannot reach rank 0 stops at the rendezvous timeout, naming the address",
          "[distributed][launch]") {
  const std::string d = setup_dir();
  ProcessResult r = run_process(launch(2, 1, 1, port(4), train_args(d, "alone")), std::vector<std::string>{"HYBRID_RENDEZVOUS_TIMEOUT=1"});
  INFO(r.output);
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.output, Catch::Contains("rendezvous (rank 1): could not reach rank 0 at 127.0.0.1:" + std::to_string(port(4))));
}

TEST_CASE("hybrid launch: bad arguments are refused naming the option", "[distributed][launch]") {
  ProcessResult r = run_process(hybrid({"launch", "--nnodes", "2", "--node-rank", "2", "--", "train"}));
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.output, Catch::Contains("launch: --node-rank 2 is not in [0, 2)"));
  ProcessResult none = run_process(hybrid({"launch", "--nproc-per-node", "2"}));
  REQUIRE(none.exit_code == 2);
  REQUIRE_THAT(none.output, Catch::Contains("launch: give the command after --"));
}
