#include <catch2/catch.hpp>

#include "core/device.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "config_test_util.h"
#include "core/safetensors.h"
#include "train/cli.h"

namespace hyb {
int cmd_config(Args& args);
}

using namespace hyb;
using namespace hyb::config_test;

namespace {

// Runs `hybrid config ARGS...` and returns what it printed on stdout and stderr.
std::pair<std::string, std::string> run_config(std::vector<std::string> argv) {
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  try {
    Args args("config", std::move(argv));
    cmd_config(args);
  } catch (...) {
    std::cout.rdbuf(old_out);
    std::cerr.rdbuf(old_err);
    throw;
  }
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {out.str(), err.str()};
}

}  // namespace

TEST_CASE("hybrid config show prints the resolved config on stdout and its hash on stderr", "[config][cli]") {
  ScratchDir dir("config_show_cmd");
  dir.shard("t.bin", 700);
  std::ofstream("run.json") << R"({"model": {"d_model": 64, "num_layers": 3, "block": {"mixer": {"type": "attention", "num_heads": 2}}},
    "data": {"train": "t.bin", "seq_len": 32}, "train": {"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.01}}})";
  auto [out, err] = run_config({"show", "run.json", "--set", "model.layers[1].mixer.window=8", "train.seed=3"});
  // The command resolves device and precision for this machine (a GPU makes them cuda and bf16).
  RunConfig rc = resolve(read_file("run.json"), {"model.layers[1].mixer.window=8", "train.seed=3"}, "run.json",
                         {.cuda_devices = cuda_device_count()});
  REQUIRE(out == rc.resolved.dump(2) + "\n");
  REQUIRE(err == "config_sha256: " + rc.sha256 + "\n");
  REQUIRE(rc.name == "run");
  auto [layers, err2] = run_config({"show", "run.json", "--layers", "--set=model.layers[1].mixer.window=8", "--set=train.seed=3"});
  REQUIRE(layers == "0  attention  mlp 256\n1  attention  mlp 256  window=8\n2  attention  mlp 256\n");
  REQUIRE(err2 == err);
  REQUIRE_THROWS_WITH(run_config({"show", "run.json", "--set", "train.stepz=1"}), "--set: train.stepz: unknown key (did you mean \"train.steps\"?)");
  REQUIRE_THROWS_WITH(run_config({"show"}), Catch::Contains("config show: expected one config file"));
  REQUIRE_THROWS_WITH(run_config({"shwo", "run.json"}), "config: unknown subcommand \"shwo\" (show or keys)");
}

TEST_CASE("hybrid config show --layers prints a generated layout as its code string", "[config][cli][layout]") {
  ScratchDir dir("config_show_cmd_generate");
  dir.shard("t.bin", 700);
  std::ofstream("swa.json") << R"({"model": {"d_model": 64,
      "blocks": {"S": {"mixer": {"type": "attention", "num_heads": 2, "window": 8}}, "T": {"mixer": {"type": "attention", "num_heads": 2}}},
      "layout": {"generate": {"n_layers": 16, "base": "S", "special": "T", "placement": "every", "period": 6}}},
    "data": {"train": "t.bin", "seq_len": 32}})";
  auto [layers, err] = run_config({"show", "swa.json", "--layers"});
  std::string expected = "layout: SSSSSTSSSSSTSSST\n";
  for (int i = 0; i < 16; ++i) expected += str_cat(i < 10 ? " " : "", i, "  attention  mlp 256", i == 5 || i == 11 || i == 15 ? "  window=0" : "", "\n");
  REQUIRE(layers == expected);
}
