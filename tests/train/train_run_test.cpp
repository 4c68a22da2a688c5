// End-to-end runs of the `hybrid` binary on a tiny byte-level model: resume is bit-identical, a run
// killed (SIGKILL) during or after a checkpoint resumes from the last complete one, and a damaged
// checkpoint is refused while the previous one stays usable. Separate processes: a crash is real.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "data/shard.h"
#include "process.h"

using namespace hyb;
namespace fs = std::filesystem;

namespace {

using RunResult = ProcessResult;

RunResult run_hybrid(const std::vector<std::string>& args, const std::string& fault = "") {
  std::vector<std::string> argv{HYBRID_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, fault.empty() ? "" : "HYBRID_FAULT=" + fault);
}

std::string setup_dir() {
  fs::path d = fs::temp_directory_path() / "hybrid_tests" / "train_run";
  fs::remove_all(d);
  fs::create_directories(d);
  RngStream r(5, "test.shard");
  std::vector<uint16_t> train, val;
  // Repeating phrases with noise: a little structure to learn.
  for (int i = 0; i < 6000; ++i) train.push_back(uint16_t(r.below(8) == 0 ? r.below(256) : "hybrid models"[i % 13]));
  for (int i = 0; i < 600; ++i) val.push_back(uint16_t("hybrid models"[i % 13]));
  write_shard((d / "train.bin").string(), train);
  write_shard((d / "val.bin").string(), val);
  nlohmann::json cfg = {
      {"model", {{"d_model", 32}, {"num_layers", 2},
                 {"block", {{"mixer", {{"type", "attention"}, {"num_heads", 2}, {"window", 8}}}}}}},
      {"data", {{"tokenizer", "byte"}, {"train", (d / "train.bin").string()}, {"val", (d / "val.bin").string()},
                {"seq_len", 16}}},
      {"train", {{"batch_size", 4}, {"grad_accum", 2}, {"steps", 6}, {"log_interval", 1}, {"eval_interval", 3},
                 {"checkpoint_interval", 3}, {"optimizer", {{"lr", 3e-3}}}, {"schedule", {{"warmup_steps", 2}}}}},
      {"eval", {{"max_windows", 8}}}};
  std::ofstream((d / "cfg.json").string()) << cfg.dump(2);
  return d.string();
}

// The train records' losses, one string per step (%.9g as written).
std::vector<std::string> train_losses(const std::string& metrics) {
  std::vector<std::string> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") out.push_back(std::to_string(j["step"].get<int>()) + ":" + j["loss"].dump());
  }
  return out;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("training resumes bit-identically after a kill, whether the kill hits after or during a checkpoint", "[train][resume]") {
  const std::string d = setup_dir();
  const std::string cfg = d + "/cfg.json";
  auto out = [&](const char* name) { return "train.out_dir=\"" + d + "/" + name + "\""; };

  RunResult a = run_hybrid({"train", "--config", cfg, "--set", out("a")});
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const std::vector<std::string> straight = train_losses(d + "/a/metrics.jsonl");
  REQUIRE(straight.size() == 6);

  SECTION("killed right after the step-3 checkpoint, resumed from the run directory") {
    RunResult b = run_hybrid({"train", "--config", cfg, "--set", out("b")}, "checkpoint.written:1");
    REQUIRE(b.signal == SIGKILL);
    RunResult b2 = run_hybrid({"train", "--resume", d + "/b"});
    INFO(b2.output);
    REQUIRE(b2.exit_code == 0);
    REQUIRE(train_losses(d + "/b/metrics.jsonl") == straight);
    REQUIRE(file_bytes(d + "/b/ckpt/step_0000006/model.safetensors") == file_bytes(d + "/a/ckpt/step_0000006/model.safetensors"));
  }

  SECTION("killed while writing the step-6 checkpoint: the half-written one is ignored") {
    RunResult c = run_hybrid({"train", "--config", cfg, "--set", out("c")}, "checkpoint.partial:2");
    REQUIRE(c.signal == SIGKILL);
    REQUIRE(fs::exists(d + "/c/ckpt/step_0000006.tmp"));
    REQUIRE_FALSE(fs::exists(d + "/c/ckpt/step_0000006"));
    RunResult c2 = run_hybrid({"train", "--resume", d + "/c", "--config", cfg, "--set", out("c")});
    INFO(c2.output);
    REQUIRE(c2.exit_code == 0);
    REQUIRE(c2.output.find("resumed from " + d + "/c/ckpt/step_0000003") != std::string::npos);
    REQUIRE_FALSE(fs::exists(d + "/c/ckpt/step_0000006.tmp"));
    REQUIRE(file_bytes(d + "/c/ckpt/step_0000006/model.safetensors") == file_bytes(d + "/a/ckpt/step_0000006/model.safetensors"));
  }

  SECTION("a truncated checkpoint is refused naming the file, and the previous one still evaluates") {
    const std::string w = d + "/a/ckpt/step_0000006/model.safetensors";
    fs::resize_file(w, fs::file_size(w) - 100);
    RunResult e = run_hybrid({"eval", "--checkpoint", d + "/a/ckpt/step_0000006"});
    REQUIRE(e.exit_code == 2);
    REQUIRE(e.output.find(w) != std::string::npos);
    REQUIRE(e.output.find("truncated") != std::string::npos);
    RunResult ok = run_hybrid({"eval", "--checkpoint", d + "/a/ckpt/step_0000003"});
    INFO(ok.output);
    REQUIRE(ok.exit_code == 0);
    REQUIRE(ok.output.find("loss ") != std::string::npos);
  }

  SECTION("a resumed run with a changed config is refused naming the hash") {
    RunResult r = run_hybrid({"train", "--resume", d + "/a", "--set", "train.optimizer.lr=0.01"});
    REQUIRE(r.exit_code == 2);
    REQUIRE(r.output.find("config_sha256") != std::string::npos);
  }

  SECTION("starting a fresh run over an existing one is refused") {
    RunResult r = run_hybrid({"train", "--config", cfg, "--set", out("a")});
    REQUIRE(r.exit_code == 2);
    REQUIRE(r.output.find("--resume") != std::string::npos);
  }
}

TEST_CASE("a non-finite loss stops the run naming the step, or skips steps up to the limit", "[train][nonfinite]") {
  const std::string d = setup_dir();
  const std::string cfg = d + "/cfg.json";
  // A learning rate this large sends the weights to inf in one update.
  RunResult stop = run_hybrid({"train", "--config", cfg, "--set", "train.out_dir=\"" + d + "/s\"", "--set",
                               "train.optimizer.lr=1e30", "--set", "train.grad_clip=0"});
  INFO(stop.output);
  REQUIRE(stop.exit_code == 2);
  REQUIRE(stop.output.find("step 2: ") != std::string::npos);
  REQUIRE((stop.output.find("NaN") != std::string::npos || stop.output.find("inf") != std::string::npos ||
           stop.output.find("not finite") != std::string::npos));
  RunResult skip = run_hybrid({"train", "--config", cfg, "--set", "train.out_dir=\"" + d + "/k\"", "--set",
                               "train.optimizer.lr=1e30", "--set", "train.grad_clip=0", "--set", "train.nonfinite=\"skip\"",
                               "--set", "train.nonfinite_max_skips=2"});
  INFO(skip.output);
  REQUIRE(skip.exit_code == 2);
  REQUIRE(skip.output.find("step skipped") != std::string::npos);
  REQUIRE(skip.output.find("(2 consecutive skipped steps)") != std::string::npos);
}
