// The error messages of config.md 8.2, each from a config that triggers it. Where an example
// speaks of a family that does not exist yet, the same message shape is produced with attention
// (its window is >= 0, where nha's is >= -1; its registry list is "attention").
#include <catch2/catch.hpp>

#include "config_test_util.h"

using namespace hyb;
using namespace hyb::config_test;

namespace {

std::string config(const std::string& model, const std::string& train = R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001}})",
                   const std::string& data = R"({"train": "t.bin", "seq_len": 64})") {
  return R"({"model": )" + model + R"(, "data": )" + data + R"(, "train": )" + train + "}";
}

const std::string kUniform24 = R"({"d_model": 1024, "num_layers": 24,
  "block": {"mixer": {"type": "attention", "num_heads": 16, "window": 32}}})";

const std::string kLayout24 = R"({"d_model": 1024,
  "blocks": {"G": {"mixer": {"type": "attention", "num_heads": 16, "window": 64}}, "A": {"mixer": {"type": "attention", "num_heads": 16}}},
  "layout": {"repeat": "GGGGGGAG", "n_layers": 24}, "overrides": [{"layers": "6;8", "mixer": {"window": 0}}]})";

}  // namespace

TEST_CASE("an unknown key under train is refused and named, with the key elsewhere in the schema as suggestion", "[config][errors]") {
  const std::string q = "configs/quickstart.json";
  REQUIRE(error_no_files(config(kUniform24, R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001}, "lerning_rate_typo": 3})"), {}, q) ==
          "configs/quickstart.json: train.lerning_rate_typo: unknown key");
  REQUIRE(error_no_files(config(kUniform24, R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001}, "lr": 3})"), {}, q) ==
          "configs/quickstart.json: train.lr: unknown key (did you mean \"train.optimizer.lr\"?)");
}

TEST_CASE("unknown keys suggest the closest key of the same object within the edit distance", "[config][errors]") {
  REQUIRE(error_no_files(config(kUniform24, R"({"batch_size": 8, "stesp": 10, "optimizer": {"lr": 0.001}})")) ==
          "configs/x.json: train.stesp: unknown key (did you mean \"train.steps\"?)");
  REQUIRE(error_no_files(config(kUniform24, R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001, "weight_dacay": 1}})")) ==
          "configs/x.json: train.optimizer.weight_dacay: unknown key (did you mean \"train.optimizer.weight_decay\"?)");
  // Beyond the distance (6 edits for 17 characters) there is no suggestion.
  REQUIRE(error_no_files(config(kUniform24, R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001, "weight_dacay_rate": 1}})")) ==
          "configs/x.json: train.optimizer.weight_dacay_rate: unknown key");
  REQUIRE(error_no_files(config(kUniform24, R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001}, "schedule": {"warmup_step": 5}})")) ==
          "configs/x.json: train.schedule.warmup_step: unknown key (did you mean \"train.schedule.warmup_steps\"?)");
  REQUIRE(error_no_files(R"({"modle": {}, "model": {}, "data": {}})") == "configs/x.json: modle: unknown key (did you mean \"model\"?)");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 2, "block": {"mixer": {"type": "attention", "num_heads": 2}, "mlpp": {}}})")) ==
          "configs/x.json: model.block.mlpp: unknown key (did you mean \"model.block.mlp\"?)");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 2, "num_heads": 2, "block": {"mixer": {"type": "attention", "num_heads": 2}}})")) ==
          "configs/x.json: model.num_heads: unknown key (did you mean \"model.block.mixer.num_heads\"?)");
}

TEST_CASE("every message shape of config.md 8.2 comes from a config that triggers it", "[config][errors]") {
  SECTION("missing steps") {
    REQUIRE(error_no_files(config(kUniform24, R"({"batch_size": 8, "optimizer": {"lr": 0.001}})")) ==
            "configs/x.json: train.steps: missing required key (give train.steps or train.tokens)");
  }
  SECTION("a bad value that reached layers through block names the layers it reached") {
    const std::string m = R"({"d_model": 1024, "num_layers": 24,
      "block": {"mixer": {"type": "attention", "num_heads": 16, "window": -32}},
      "overrides": [{"layers": "6::8", "mixer": {"window": 0}}]})";
    REQUIRE(error_no_files(config(m), {}, "configs/nha_340m.json") ==
            "configs/nha_340m.json: model.block.mixer.window: expected an integer >= 0, got -32 (in model.layers[0:6,7:14,15:22,23])");
  }
  SECTION("an unknown mixer key with its suggestion and the layers") {
    const std::string m = R"({"d_model": 1024, "num_layers": 24, "block": {"mixer": {"type": "attention", "num_heads": 16, "windw": 32}}})";
    REQUIRE(error_no_files(config(m), {}, "configs/nha_340m.json") ==
            "configs/nha_340m.json: model.block.mixer.windw: unknown key (did you mean \"model.block.mixer.window\"?) (in model.layers[*])");
  }
  SECTION("selector syntax and range") {
    REQUIRE(error_no_files(config(kLayout24), {}, "configs/gdn_h.json") ==
            "configs/gdn_h.json: model.overrides[0].layers: expected a layer selector such as \"6::8\", \"3,11\" or \"*\", got \"6;8\"");
    REQUIRE(error_no_files(config(kLayout24), {"model.overrides[0].layers=\"24\""}, "configs/gdn_h.json") ==
            "--set: model.overrides[0].layers: expected indices below 24 (the model has 24 layers), got \"24\"");
    std::string written = kLayout24;
    written.replace(written.find("6;8"), 3, "24");
    REQUIRE(error_no_files(config(written), {}, "configs/gdn_h.json") ==
            "configs/gdn_h.json: model.overrides[0].layers: expected indices below 24 (the model has 24 layers), got \"24\"");
  }
  SECTION("an undefined layout code") {
    std::string written = kLayout24;
    written.replace(written.find("GGGGGGAG"), 8, "GGGGGGAH");
    REQUIRE(error_no_files(config(written), {}, "configs/gdn_h.json") ==
            "configs/gdn_h.json: model.layout.repeat: expected a code defined in model.blocks (\"A\", \"G\"), got \"H\"");
  }
  SECTION("a rule between keys of an explicit layer") {
    std::string layers;
    for (int i = 0; i < 5; ++i)
      layers += std::string(i ? ", " : "") + R"({"mixer": {"type": "attention", "num_heads": 12, "num_kv_heads": )" + (i == 3 ? "5" : "4") + "}}";
    REQUIRE(error_no_files(config(R"({"d_model": 768, "layers": [)" + layers + "]}")) ==
            "configs/x.json: model.layers[3].mixer.num_kv_heads: expected a divisor of num_heads (12), got 5");
  }
  SECTION("an unknown layer type lists the registry") {
    REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 3, "block": {"mixer": {"type": "nha2", "num_heads": 2}}})")) ==
            "configs/x.json: model.block.mixer.type: expected a layer type (attention, gated_deltanet, gsa, head_split, mamba2, nha, pha), got \"nha2\" (in model.layers[*])");
  }
  SECTION("batch size against grad_accum and ranks") {
    ResolveOptions two;
    two.world_size = 2;
    two.check_files = false;
    REQUIRE(error_of(config(kUniform24, R"({"batch_size": 12, "grad_accum": 4, "steps": 10, "optimizer": {"lr": 0.001}})"), {}, "configs/x.json", two) ==
            "configs/x.json: train.batch_size: expected a multiple of grad_accum x ranks (4 x 2 = 8), got 12");
  }
  SECTION("a schedule key of another type") {
    REQUIRE(error_no_files(config(kUniform24, R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001},
                                                  "schedule": {"type": "plateau", "final_ratio": 0.1}})")) ==
            "configs/x.json: train.schedule.final_ratio: cannot be used here: schedule type is \"plateau\"");
  }
  SECTION("shard globs and shard sizes") {
    ScratchDir dir("config_errors_files");
    dir.shard("data/ts/ts.train.bin", 4000);
    dir.shard("data/ts/ts.val.bin", 12, 3);
    const std::string m = R"({"d_model": 64, "num_layers": 1, "block": {"mixer": {"type": "attention", "num_heads": 2}}})";
    REQUIRE(error_of(config(m, R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001}})",
                            R"({"train": "data/fineweb/train_*.bin", "seq_len": 256})")) ==
            "configs/x.json: data.train: expected shard files, got \"data/fineweb/train_*.bin\" (no file matches)");
    REQUIRE(error_of(config(m, R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001}})",
                            R"({"train": "data/ts/ts.train.bin", "val": "data/ts/ts.val.bin", "seq_len": 256})")) ==
            "configs/x.json: data.val: expected a shard with at least 257 tokens (seq_len + 1), got \"data/ts/ts.val.bin\" (12 tokens)");
  }
  SECTION("a --set value into the formed list") {
    REQUIRE(error_no_files(config(kUniform24), {"model.layers[11].mixer.window=4k"}) ==
            "--set: model.layers[11].mixer.window: expected an integer >= 0, got \"4k\"");
  }
  SECTION("a --set path into the compact keys of a resolved config") {
    RunConfig rc = resolve_no_files(config(kUniform24));
    REQUIRE(error_no_files(rc.resolved.dump(2), {"model.block.mixer.window=8"}) ==
            "--set: model.block.mixer.window: cannot be used here: this config lists its layers explicitly; set model.layers[...] instead");
  }
  SECTION("a duplicate key and a syntax error") {
    REQUIRE(error_no_files(R"({"model": {}, "data": {}, "model": {}})") == "configs/x.json: model: duplicate key");
    REQUIRE(error_no_files("{\"model\": {},\n \"data\": }") ==
            "configs/x.json:2:10: invalid JSON: syntax error while parsing value - unexpected '}'; expected '[', '{', or a literal");
  }
}

TEST_CASE("structural errors of the layer list name the key as written", "[config][errors]") {
  const std::string b = R"("block": {"mixer": {"type": "attention", "num_heads": 2}})";
  REQUIRE(error_no_files(config(R"({"d_model": 64, )" + b + "}")) == "configs/x.json: model.num_layers: missing required key");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 2})")) == "configs/x.json: model.block: missing required key");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 0, )" + b + "}")) ==
          "configs/x.json: model.num_layers: expected an integer >= 1, got 0");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 2, "layers": [], )" + b + "}")) ==
          "configs/x.json: model.block: cannot be used here: model.layers lists the layers explicitly");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 3, "layers": [{"mixer": {"type": "attention", "num_heads": 2}}]})")) ==
          "configs/x.json: model.num_layers: expected 1 (the length of model.layers), got 3");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "layers": [{"mlp": {}}]})")) == "configs/x.json: model.layers[0].mixer: missing required key");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 2, "block": {"mlp": {}}})")) ==
          "configs/x.json: model.block.mixer: missing required key (in model.layers[*])");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 2, "block": {"mixer": {"num_heads": 2}}})")) ==
          "configs/x.json: model.block.mixer.type: missing required key (in model.layers[*])");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "layout": {"pattern": "AB"}, "blocks": {"A": {"mixer": {"type": "attention", "num_heads": 2}}, "B": {"mlp": {}}}})")) ==
          "configs/x.json: model.blocks.B.mixer: missing required key (in model.layers[1])");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "layout": {"generate": {}}, "blocks": {}})")) ==
          "configs/x.json: model.layout.generate.n_layers: missing required key");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "layout": {"repeat": "AB", "n_layers": 5}, "blocks": {"A": {}, "B": {}}})")) ==
          "configs/x.json: model.layout.n_layers: expected a multiple of the number of codes of model.layout.repeat (2), got 5");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "layout": {"pattern": "A", "repeat": "A"}, "blocks": {"A": {}}})")) ==
          "configs/x.json: model.layout.repeat: cannot be used here: model.layout has pattern");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "layout": {"pattern": "A"}})")) ==
          "configs/x.json: model.blocks: missing required key (the layout form names its blocks in model.blocks)");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 4, "layout": {"pattern": "AA"}, "blocks": {"A": {"mixer": {"type": "attention", "num_heads": 2}}}})")) ==
          "configs/x.json: model.num_layers: expected 2 (the number of layers of model.layout), got 4");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 2, )" + b + R"(, "overrides": [{"layers": "1"}]})")) ==
          "configs/x.json: model.overrides[0]: expected \"mixer\" or \"mlp\" besides \"layers\", got {\"layers\":\"1\"}");
  REQUIRE(error_no_files(config(R"({"d_model": 64, "num_layers": 2, )" + b + R"(, "overrides": [{"layer": "1", "mixer": {}}]})")) ==
          "configs/x.json: model.overrides[0].layer: unknown key (did you mean \"model.overrides[0].layers\"?)");
}

TEST_CASE("a value that came through an override names the override and the layers it selected", "[config][errors]") {
  const std::string m = R"({"d_model": 1024, "num_layers": 24,
    "block": {"mixer": {"type": "attention", "num_heads": 16, "window": 32}},
    "overrides": [{"layers": "6::8", "mixer": {"window": -1}}, {"layers": [14], "mixer": {"window": 0}}]})";
  REQUIRE(error_no_files(config(m)) == "configs/x.json: model.overrides[0].mixer.window: expected an integer >= 0, got -1 (in model.layers[6,22])");
  // The same through a phase-1 assignment of the block: the source is --set.
  REQUIRE(error_no_files(config(kUniform24), {"model.block.mixer.sinks=-2"}) ==
          "--set: model.block.mixer.sinks: expected an integer >= 0, got -2 (in model.layers[*])");
  // A rule that reads d_model names the first layer where it fails.
  REQUIRE(error_no_files(config(R"({"d_model": 1000, "num_layers": 3, "block": {"mixer": {"type": "attention", "num_heads": 12}}})")) ==
          "configs/x.json: model.layers[0].mixer.num_heads: expected a divisor of d_model (1000) when head_dim is null, got 12");
}

TEST_CASE("values are shown as compact JSON cut at 40 characters", "[config][errors]") {
  REQUIRE(compact_value(Json("abc")) == "\"abc\"");
  REQUIRE(compact_value(Json::array({1, 2.5, "x"})) == "[1,2.5,\"x\"]");
  const std::string v = compact_value(Json(std::string(60, 'a')));
  REQUIRE(v.size() == 40);
  REQUIRE(v == "\"" + std::string(36, 'a') + "...");
  REQUIRE(error_no_files(config(kUniform24, R"({"batch_size": 8, "steps": 10, "optimizer": {"lr": {"a very long key name": [1, 2, 3, 4, 5, 6, 7, 8]}}})")) ==
          "configs/x.json: train.optimizer.lr: expected a number > 0, got {\"a very long key name\":[1,2,3,4,5,6,...");
}
