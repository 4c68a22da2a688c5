#include <catch2/catch.hpp>

#include "config_test_util.h"

using namespace hyb;
using namespace hyb::config_test;

namespace {

const std::string kBase = R"({"model": {"d_model": 128, "num_layers": 4,
    "block": {"mixer": {"type": "attention", "num_heads": 4}},
    "overrides": [{"layers": "0:2", "mixer": {"num_heads": 8}}]},
  "data": {"train": "t.bin", "seq_len": 64},
  "train": {"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001, "betas": [0.9, 0.95]}}})";

std::vector<int64_t> layer_values(const RunConfig& rc, const char* part, const char* key) {
  std::vector<int64_t> out;
  for (const Json& l : rc.resolved["model"]["layers"]) out.push_back(l[part][key].get<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("phase-1 assignments apply before phase-2 ones whatever the command-line order", "[config][set]") {
  RunConfig rc = resolve_no_files(kBase, {"model.layers[2].mixer.num_heads=16", "model.block.mixer.num_heads=2",
                                          "model.num_layers=5"});
  REQUIRE(layer_values(rc, "mixer", "num_heads") == std::vector<int64_t>{8, 8, 16, 2, 2});
  // Derived values follow the phase-2 change: head_dim = d_model / num_heads.
  REQUIRE(layer_values(rc, "mixer", "head_dim") == std::vector<int64_t>{16, 16, 8, 64, 64});
  REQUIRE(layer_values(rc, "mixer", "rope_dim") == std::vector<int64_t>{16, 16, 8, 64, 64});
  // Phase 1 changes the config as written: the overrides and the layout too.
  RunConfig no_override = resolve_no_files(kBase, {"model.overrides=[]"});
  REQUIRE(layer_values(no_override, "mixer", "num_heads") == std::vector<int64_t>{4, 4, 4, 4});
  RunConfig later = resolve_no_files(kBase, {"model.overrides[0].layers=\"1:\"", "model.layers[-1].mlp.expansion=2"});
  REQUIRE(layer_values(later, "mixer", "num_heads") == std::vector<int64_t>{4, 8, 8, 8});
  REQUIRE(layer_values(later, "mlp", "intermediate_size") == std::vector<int64_t>{512, 512, 512, 256});
}

TEST_CASE("a phase-2 assignment with several layers writes each and a later one wins", "[config][set]") {
  RunConfig rc = resolve_no_files(kBase, {"model.layers[*].mixer.window=64", "model.layers[1,3].mixer.window=8",
                                          "model.layers[::2].mixer.sinks=4"});
  REQUIRE(layer_values(rc, "mixer", "window") == std::vector<int64_t>{64, 8, 64, 8});
  REQUIRE(layer_values(rc, "mixer", "sinks") == std::vector<int64_t>{4, 0, 4, 0});
  RunConfig whole = resolve_no_files(kBase, {"model.layers[0]={\"mixer\": {\"type\": \"attention\", \"num_heads\": 2}, \"mlp\": {\"type\": \"none\"}}"});
  REQUIRE(whole.model.layers[0].mixer["num_heads"] == 2);
  REQUIRE(whole.model.layers[0].mlp.type == "none");
  RunConfig list = resolve_no_files(kBase, {"model.layers=[{\"mixer\": {\"type\": \"attention\", \"num_heads\": 2}}]"});
  REQUIRE(list.model.num_layers() == 1);
}

TEST_CASE("a wildcard assignment that is invalid for one layer names that layer", "[config][set]") {
  // num_kv_heads 8 divides the 8 heads of layers 0 and 1 but not the 4 of layer 2.
  REQUIRE(error_no_files(kBase, {"model.layers[*].mixer.num_kv_heads=8"}) ==
          "--set: model.layers[2].mixer.num_kv_heads: expected a divisor of num_heads (4), got 8");
  REQUIRE(error_no_files(kBase, {"model.layers[*].mixer.windw=8"}) ==
          "--set: model.layers[0].mixer.windw: unknown key (did you mean \"model.layers[0].mixer.window\"?)");
  REQUIRE(error_no_files(kBase, {"model.layers[4].mixer.window=8"}) ==
          "--set: model.layers[4].mixer.window: expected indices below 4 (the model has 4 layers), got \"4\"");
  REQUIRE(error_no_files(kBase, {"model.layers[0].mixer.num_heads.x=8"}) ==
          "--set: mixer.num_heads: expected an object (the path goes on to .x), got 8");
}

TEST_CASE("a resolved config resolves to itself and refuses paths into the compact keys", "[config][set]") {
  RunConfig rc = resolve_no_files(kBase);
  const std::string text = rc.resolved.dump(2);
  RunConfig again = resolve_no_files(text);
  REQUIRE(again.resolved.dump(2) == text);
  REQUIRE(again.sha256 == rc.sha256);
  for (const char* path : {"model.block.mixer.window=8", "model.blocks.X={}", "model.layout.pattern=\"AA\""})
    REQUIRE_THAT(error_no_files(text, {path}), Catch::Contains("cannot be used here: this config lists its layers explicitly; set model.layers[...] instead"));
  RunConfig changed = resolve_no_files(text, {"model.layers[3].mixer.window=16"});
  REQUIRE(changed.sha256 != rc.sha256);
  REQUIRE(changed.model.layers[3].mixer["window"] == 16);
}

TEST_CASE("values are JSON when they parse and strings otherwise, checked like values in the file", "[config][set]") {
  RunConfig rc = resolve_no_files(kBase, {"model.block.mixer.qk_norm=rms", "name=\"123\"", "train.optimizer.betas[1]=0.99",
                                          "train.schedule={\"type\": \"constant\"}"});
  REQUIRE(rc.model.layers[3].mixer["qk_norm"] == "rms");
  REQUIRE(rc.name == "123");
  REQUIRE(rc.train->optimizer.adam.beta2 == 0.99);
  REQUIRE(rc.train->schedule.type == "constant");
  REQUIRE(rc.resolved["train"]["schedule"] == Json{{"type", "constant"}, {"warmup_steps", 0}, {"warmup_tokens", nullptr},
                                                    {"warmup_fraction", nullptr}, {"start_ratio", 0.0}});
  REQUIRE(error_no_files(kBase, {"name=123"}) == "--set: name: expected a string, got 123");
  REQUIRE(error_no_files(kBase, {"train.optimizer.lr=abc"}) == "--set: train.optimizer.lr: expected a number > 0, got \"abc\"");
  REQUIRE(error_no_files(kBase, {"train.optimizer.betas[2]=0.5"}) ==
          "--set: train.optimizer.betas[2]: expected indices below 2 (the list has 2 elements), got \"2\"");
  REQUIRE(error_no_files(kBase, {"train.steps.x=1"}) == "--set: train.steps: expected an object (the path goes on to .x), got 10");
  REQUIRE(error_no_files(kBase, {"train.lerning_rate=1"}) == "--set: train.lerning_rate: unknown key");
  REQUIRE_THROWS_WITH(parse_assignment("model.x"), "--set: model.x: expected PATH=VALUE such as model.layers[11].mixer.window=4096, got \"model.x\"");
  REQUIRE_THROWS_WITH(parse_assignment("model..x=1"),
                      "--set: model..x: expected a path such as model.layers[11].mixer.window or train.optimizer.lr, got \"model..x\"");
  REQUIRE_THROWS_WITH(parse_assignment("train.schedule={\"type\": 1, \"type\": 2}"), "--set: train.schedule.type: duplicate key");
  REQUIRE(parse_assignment("data.val=").value == Json(""));
  REQUIRE(parse_assignment("a.b=[1,2]").value == Json::array({1, 2}));
}
