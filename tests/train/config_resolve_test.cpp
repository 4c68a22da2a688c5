#include <catch2/catch.hpp>

#include "config_test_util.h"
#include "layers/mlp/mlp_config.h"
#include "layers/softmax_attention/attention.h"
#include "layers/softmax_attention/attention_config.h"
#include "core/sha256.h"
#include "train/config/config_hash.h"
#include "train/config/config_layers.h"

#include <array>

using namespace hyb;
using namespace hyb::config_test;

namespace {

// config.md 10.1 with "type": "attention" in place of nha: the NHA-only keys (value_head_dim,
// slots) dropped, and the last layer's full window written as attention's 0 (nha's -1).
const char* kQuickstart = R"({
  "name": "quickstart",
  "model": {
    "d_model": 128,
    "num_layers": 4,
    "block": {
      "mixer": { "type": "attention", "num_heads": 4, "num_kv_heads": 4, "head_dim": 32, "window": 16 },
      "mlp": { "type": "swiglu" }
    },
    "overrides": [ { "layers": "-1", "mixer": { "window": 0 } } ]
  },
  "data": {
    "tokenizer": "gpt2",
    "train": "data/ts/ts.train.bin",
    "val": "data/ts/ts.val.bin",
    "seq_len": 128
  },
  "train": {
    "batch_size": 16,
    "steps": 300,
    "optimizer": { "lr": 2e-3, "weight_decay": 0.1 },
    "schedule": { "type": "warmup_cosine", "warmup_steps": 30, "final_ratio": 0.1 },
    "eval_interval": 100,
    "checkpoint_interval": 100
  },
  "eval": { "max_windows": 64 }
})";

// 10.2's recipe on an attention model: 24 layers, a window of 32 except in layers 6, 14 and 22.
std::string model_340m(const std::string& layer_part) {
  return R"({ "name": "attn_340m",
  "model": { "d_model": 1024, "norm_eps": 1e-6, "tie_embeddings": false, )" + layer_part + R"( },
  "data": { "tokenizer": "gpt2", "train": "data/fineweb/fineweb_train_*.bin", "val": "data/fineweb/fineweb_val_*.bin", "seq_len": 2048 },
  "train": { "batch_size": 256, "grad_accum": 4, "tokens": 15000000000,
             "optimizer": { "lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-15, "weight_decay": 0.1 },
             "schedule": { "type": "warmup_cosine", "warmup_tokens": 500000000, "start_ratio": 0.1, "final_ratio": 0.1 },
             "grad_clip": 1.0, "precision": "bf16", "eval_interval": 1000, "checkpoint_interval": 1000,
             "data_parallel": { "bucket_mb": 25, "zero1": true } },
  "eval": { "max_windows": 256 } })";
}

const char* kUniform340m = R"("num_layers": 24,
  "block": { "mixer": { "type": "attention", "num_heads": 16, "num_kv_heads": 16, "head_dim": 64, "window": 32 },
             "mlp": { "type": "swiglu" } },
  "overrides": [ { "layers": "6::8", "mixer": { "window": 0 } } ])";

std::string explicit_340m() {
  std::string layers = "\"layers\": [";
  for (int i = 0; i < 24; ++i) {
    const int window = i % 8 == 6 ? 0 : 32;
    layers += std::string(i ? ", " : "") + R"({ "mixer": { "type": "attention", "head_dim": 64, "num_heads": 16, "window": )" +
              std::to_string(window) + " } }";
  }
  return layers + "]";
}

// config.md 10.3's shape with both codes attention: G windowed, A full.
const char* kBlocksGA = R"("blocks": { "G": { "mixer": { "type": "attention", "num_heads": 16, "window": 64 } },
              "A": { "mixer": { "type": "attention", "num_heads": 16, "window": 0, "rope_theta": 500000.0 } } },
  "block": { "mlp": { "type": "swiglu" } })";

ResolveOptions gpu_no_files() {
  ResolveOptions o;
  o.cuda_devices = 1;
  o.check_files = false;
  return o;
}

RunConfig resolve_340m(const std::string& layer_part, const std::vector<std::string>& sets = {}) {
  return resolve(model_340m(layer_part), sets, "configs/attn_340m.json", gpu_no_files());
}

// Resolving the resolved text again gives the same text, byte for byte, and the same hash.
void require_idempotent(const RunConfig& rc, ResolveOptions o) {
  const std::string text = rc.resolved.dump(2);
  RunConfig again = resolve(text, {}, rc.source, o);
  REQUIRE(again.resolved.dump(2) == text);
  REQUIRE(again.sha256 == rc.sha256);
}

}  // namespace

TEST_CASE("the quickstart with attention in place of nha resolves to every key spelled out", "[config][resolve]") {
  ScratchDir dir("config_quickstart");
  dir.shard("data/ts/ts.train.bin", 30000);
  dir.shard("data/ts/ts.val.bin", 3000, 2);
  RunConfig rc = resolve(kQuickstart, {}, "configs/quickstart.json");
  REQUIRE(rc.name == "quickstart");
  REQUIRE(rc.model.vocab_size == 50304);
  REQUIRE(rc.model.max_seq_len == 128);
  REQUIRE(rc.model.num_layers() == 4);
  for (int i = 0; i < 4; ++i) {
    AttentionConfig a = attention_config_from_json(nlohmann::json(rc.model.layers[size_t(i)].mixer));
    REQUIRE(a.window == (i == 3 ? 0 : 16));
    REQUIRE(a.head_dim == 32);
    REQUIRE(a.v_head_dim == 32);
    REQUIRE(a.rope_dim == 32);
    REQUIRE(a.max_position == 128);
    REQUIRE(*a.softmax_scale == Approx(1.0 / std::sqrt(32.0)).epsilon(1e-15));
    REQUIRE(rc.model.layers[size_t(i)].mlp.intermediate_size == 512);  // 256 * ceil(floor(8 * 128 / 3) / 256)
  }
  REQUIRE(rc.train->device.is_cpu());
  REQUIRE(rc.train->precision == "fp32");
  REQUIRE(rc.train->steps == 300);
  REQUIRE(rc.train->schedule.warmup_steps == 30);
  REQUIRE(rc.train->out_dir == "runs/quickstart");
  REQUIRE(rc.data.files.train == std::vector<std::string>{"data/ts/ts.train.bin"});
  REQUIRE(rc.data.files.val_tokens == 3000);
  REQUIRE(rc.eval.max_windows == 64);
  // Schema order: the model's scalar keys, then num_layers and layers; compact keys gone.
  std::vector<std::string> keys;
  for (const auto& [k, v] : rc.resolved["model"].items()) keys.push_back(k);
  REQUIRE(keys == std::vector<std::string>{"d_model", "vocab_size", "max_seq_len", "norm_eps", "tie_embeddings", "embed_scale",
                                           "embed_dropout", "init", "init_std", "num_layers", "layers"});
  REQUIRE(rc.resolved.begin().key() == "name");
  REQUIRE(rc.resolved["model"]["layers"][0]["mixer"].begin().key() == "type");
  require_idempotent(rc, ResolveOptions{});
}

TEST_CASE("the quickstart with only its type changed to attention is refused at the first nha-only key", "[config][resolve]") {
  std::string literal = kQuickstart;
  literal.replace(literal.find("\"head_dim\": 32,"), 15, "\"head_dim\": 32, \"value_head_dim\": 32, \"slots\": 16,");
  REQUIRE(error_no_files(literal, {}, "configs/quickstart.json") ==
          "configs/quickstart.json: model.block.mixer.value_head_dim: unknown key (did you mean \"model.block.mixer.v_head_dim\"?) "
          "(in model.layers[*])");
  std::string full_window = kQuickstart;
  full_window.replace(full_window.find("\"window\": 0 }"), 13, "\"window\": -1 }");
  REQUIRE(error_no_files(full_window, {}, "configs/quickstart.json") ==
          "configs/quickstart.json: model.overrides[0].mixer.window: expected an integer >= 0, got -1 (in model.layers[3])");
}

TEST_CASE("token budgets and token warm-ups convert to steps with ceil as in config.md 10.2", "[config][resolve]") {
  RunConfig rc = resolve_340m(kUniform340m);
  REQUIRE(rc.train->steps == 28611);
  REQUIRE(rc.train->schedule.warmup_steps == 954);
  REQUIRE(rc.resolved["train"]["tokens"] == 15000000000LL);
  REQUIRE(rc.resolved["train"]["schedule"]["warmup_tokens"] == 500000000);
  REQUIRE(rc.model.max_seq_len == 2048);
  REQUIRE(rc.model.vocab_size == 50304);
  REQUIRE(rc.model.layers[0].mlp.intermediate_size == 2816);
  REQUIRE(rc.train->precision == "bf16");
  REQUIRE(rc.train->device.is_cuda());
  REQUIRE(rc.resolved["train"]["data_parallel"]["bucket_mb"].is_number_float());
  require_idempotent(rc, gpu_no_files());
}

TEST_CASE("a model written with an override and as 24 explicit layers hashes the same", "[config][resolve][hash]") {
  RunConfig compact = resolve_340m(kUniform340m);
  RunConfig expl = resolve_340m(explicit_340m());
  REQUIRE(expl.resolved.dump() == compact.resolved.dump());
  REQUIRE(expl.sha256 == compact.sha256);
  for (int i : {6, 14, 22}) REQUIRE(compact.resolved["model"]["layers"][i]["mixer"]["window"] == 0);
  REQUIRE(compact.resolved["model"]["layers"][7]["mixer"]["window"] == 32);
  // A different window in one layer is a different config.
  RunConfig other = resolve_340m(kUniform340m, {"model.layers[5].mixer.window=31"});
  REQUIRE(other.sha256 != compact.sha256);
}

TEST_CASE("layout.repeat, layout.pattern of 24 codes and a uniform model with an override hash the same", "[config][resolve][hash]") {
  RunConfig repeat = resolve_340m(std::string(kBlocksGA) + R"(, "layout": { "repeat": "GGGGGGAG", "n_layers": 24 })");
  RunConfig pattern = resolve_340m(std::string(kBlocksGA) + R"(, "layout": { "pattern": "GGGGGGAGGGGGGGAGGGGGGGAG" })");
  RunConfig codes = resolve_340m(std::string(kBlocksGA) +
                                 R"(, "num_layers": 24, "layout": { "repeat": ["G", "G", "G", "G", "G", "G", "A", "G"], "n_layers": 24 })");
  RunConfig uniform = resolve_340m(R"("num_layers": 24,
    "block": { "mixer": { "type": "attention", "num_heads": 16, "window": 64 } },
    "overrides": [ { "layers": "6::8", "mixer": { "window": 0, "rope_theta": 500000 } } ])");
  REQUIRE(pattern.sha256 == repeat.sha256);
  REQUIRE(codes.sha256 == repeat.sha256);
  REQUIRE(uniform.sha256 == repeat.sha256);
  REQUIRE(repeat.layout_codes.size() == 24);
  REQUIRE(repeat.model.layers[14].mixer["rope_theta"].get<double>() == 500000.0);
  REQUIRE(repeat.model.layers[13].mixer["window"] == 64);
  require_idempotent(repeat, gpu_no_files());
}

TEST_CASE("key order, 4096 against 4096.0 and omitted against spelled-out defaults do not change the hash", "[config][resolve][hash]") {
  const std::string a = R"({"model": {"d_model": 256, "num_layers": 2, "block": {"mixer": {"type": "attention", "num_heads": 4, "window": 4096}}},
    "data": {"train": "t.bin", "seq_len": 512}, "train": {"batch_size": 8, "tokens": 4096000, "optimizer": {"lr": 0.001}}})";
  const std::string b = R"({"train": {"optimizer": {"lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}, "tokens": 4.096e6, "batch_size": 8.0,
      "seed": 0, "schedule": {"type": "warmup_cosine"}, "grad_clip": 1},
    "data": {"seq_len": 512.0, "task": "lm", "train": "t.bin", "val": null, "tokenizer": "gpt2"},
    "model": {"num_layers": 2, "block": {"mlp": {"type": "swiglu", "expansion": null}, "mixer": {"window": 4096.0, "num_heads": 4, "type": "attention",
      "qk_norm": "none", "rope_theta": 10000}}, "d_model": 256, "vocab_size": null, "norm_eps": 0.00001}, "eval": {}})";
  RunConfig ra = resolve_no_files(a), rb = resolve_no_files(b);
  REQUIRE(ra.sha256 == rb.sha256);
  REQUIRE(ra.resolved.dump(2) == rb.resolved.dump(2));
  REQUIRE(ra.train->steps == 1000);
  // A bookkeeping key changes the text but not the hash; a computed key changes both.
  RunConfig logged = resolve_no_files(a, {"train.log_interval=1", "train.keep_last=9", "name=\"other\"", "train.out_dir=elsewhere",
                                          "train.data_parallel.zero1=true", "train.checkpoint_interval=5"});
  REQUIRE(logged.resolved.dump() != ra.resolved.dump());
  REQUIRE(logged.sha256 == ra.sha256);
  REQUIRE(resolve_no_files(a, {"train.seed=1"}).sha256 != ra.sha256);
  REQUIRE(resolve_no_files(a, {"train.grad_clip=0.5"}).sha256 != ra.sha256);
}

TEST_CASE("the canonical text sorts keys, drops bookkeeping keys and has no whitespace", "[config][hash]") {
  RunConfig rc = resolve_no_files(R"({"name": "n", "model": {"d_model": 64, "num_layers": 1, "block": {"mixer": {"type": "attention", "num_heads": 2}}},
    "data": {"train": "t.bin", "seq_len": 32}, "train": {"batch_size": 2, "steps": 5, "optimizer": {"lr": 0.5}}})");
  const std::string c = canonical_config_text(rc.resolved);
  REQUIRE(c.find(' ') == std::string::npos);
  REQUIRE(c.rfind("{\"data\":{\"seq_len\":32,\"shuffle\":true,\"task\":\"lm\",\"tokenizer\":\"gpt2\",\"train\":\"t.bin\",\"val\":null,", 0) == 0);
  for (const char* k : {"\"name\"", "out_dir", "log_interval", "checkpoint_interval", "keep_last", "data_parallel", "bucket_mb"})
    REQUIRE(c.find(k) == std::string::npos);
  REQUIRE(c.find("\"lr\":0.5") != std::string::npos);
  REQUIRE(c.find("\"init_std\":0.02") != std::string::npos);
  REQUIRE(rc.sha256 == sha256_hex(c));
  REQUIRE(rc.sha256.size() == 64);
}

TEST_CASE("a layout whose named blocks share the base block merges the base under each", "[config][resolve]") {
  RunConfig rc = resolve_no_files(R"({"model": {"d_model": 128,
      "block": {"mlp": {"type": "swiglu", "intermediate_size": 300}, "mixer": {"num_heads": 2}},
      "blocks": {"long_code": {"mixer": {"type": "attention", "window": 8}}, "T": {"mixer": {"type": "attention", "num_heads": 4}, "mlp": {"type": "none"}}},
      "layout": {"pattern": ["long_code", "T", "long_code"]}},
    "data": {"train": "t.bin", "seq_len": 64}, "train": {"batch_size": 2, "steps": 5, "optimizer": {"lr": 0.5}}})");
  REQUIRE(rc.model.num_layers() == 3);
  REQUIRE(rc.model.layers[0].mixer["num_heads"] == 2);
  REQUIRE(rc.model.layers[0].mixer["window"] == 8);
  REQUIRE(rc.model.layers[0].mlp.intermediate_size == 300);
  REQUIRE(rc.model.layers[1].mixer["num_heads"] == 4);
  REQUIRE(rc.model.layers[1].mlp.type == "none");
  REQUIRE(rc.resolved["model"]["layers"][1]["mlp"] == Json{{"type", "none"}, {"intermediate_size", nullptr}, {"expansion", nullptr}, {"multiple_of", nullptr}});
  REQUIRE(rc.layout_codes == std::vector<std::string>{"long_code", "T", "long_code"});
}

TEST_CASE("merge replaces on another type, merges a partial mixer, replaces lists and takes nulls", "[config][merge]") {
  SourceMap src("configs/x.json");
  LayerOrigins o;
  Json a = {{"mixer", {{"type", "a"}, {"x", 1}, {"list", {1, 2, 3}}}}, {"mlp", {{"type", "swiglu"}}}};
  o.record("", a, "model.block", src);
  merge_tracked(a, o, "", Json{{"mixer", {{"list", {9}}, {"x", nullptr}, {"y", 2}}}}, "model.overrides[0]", src);
  REQUIRE(a["mixer"] == Json{{"type", "a"}, {"x", nullptr}, {"list", {9}}, {"y", 2}});
  REQUIRE(o.find("mixer.type") == Origin{"configs/x.json", "model.block.mixer.type"});
  REQUIRE(o.find("mixer.list") == Origin{"configs/x.json", "model.overrides[0].mixer.list"});
  REQUIRE(o.find("mixer.list[0]") == Origin{"configs/x.json", "model.overrides[0].mixer.list[0]"});
  REQUIRE(o.find("mixer.z") == Origin{"configs/x.json", "model.block.mixer.z"});
  merge_tracked(a, o, "", Json{{"mixer", {{"type", "b"}, {"z", 3}}}}, "model.overrides[1]", src);
  REQUIRE(a["mixer"] == Json{{"type", "b"}, {"z", 3}});  // another type: the whole object is replaced
  REQUIRE(o.find("mixer.x") == Origin{"configs/x.json", "model.overrides[1].mixer.x"});
  REQUIRE(a["mlp"] == Json{{"type", "swiglu"}});
}

TEST_CASE("later overrides win and an override may change the mlp alone", "[config][resolve]") {
  RunConfig rc = resolve_no_files(R"({"model": {"d_model": 96, "num_layers": 6,
      "block": {"mixer": {"type": "attention", "num_heads": 3}},
      "overrides": [{"layers": "*", "mixer": {"window": 5}}, {"layers": [1, -1], "mixer": {"window": 7}},
                    {"layers": "1::2", "mlp": {"expansion": 2.5}}, {"layers": "0:2", "mixer": {"sinks": 2}}]},
    "data": {"train": "t.bin", "seq_len": 64}, "train": {"batch_size": 2, "steps": 5, "optimizer": {"lr": 0.5}}})");
  std::vector<int64_t> windows, widths, sinks;
  for (const LayerConfig& l : rc.model.layers) {
    windows.push_back(l.mixer["window"].get<int64_t>());
    sinks.push_back(l.mixer["sinks"].get<int64_t>());
    widths.push_back(l.mlp.intermediate_size);
  }
  REQUIRE(windows == std::vector<int64_t>{5, 7, 5, 5, 5, 7});
  REQUIRE(sinks == std::vector<int64_t>{2, 2, 0, 0, 0, 0});
  REQUIRE(widths == std::vector<int64_t>{256, 240, 256, 240, 256, 240});  // 8*96/3 = 256; 2.5*96 = 240 (multiple_of 1)
}

TEST_CASE("the mlp width follows the rules of attention.md 7 and pha.md 5", "[config][mlp]") {
  for (auto [d, want] : std::vector<std::pair<int64_t, int64_t>>{{768, 2048}, {1024, 2816}, {256, 768}, {128, 512}, {1536, 4096}, {3072, 8192}})
    REQUIRE(derived_intermediate_size(d, std::nullopt, 256) == want);
  REQUIRE(derived_intermediate_size(608, 2.0, 1) == 1216);
  REQUIRE(derived_intermediate_size(608, 0.67, 1) == 407);
  REQUIRE(derived_intermediate_size(768, 2.5, 1) == 1920);
  Json m = {{"expansion", 0.67}};
  resolve_mlp_config(m, 608);
  REQUIRE(m == Json{{"type", "swiglu"}, {"intermediate_size", 407}, {"expansion", 0.67}, {"multiple_of", 1}});
  resolve_mlp_config(m, 608);  // resolved resolves to itself
  REQUIRE(m["intermediate_size"] == 407);
  m["intermediate_size"] = 400;
  REQUIRE_THROWS_WITH(resolve_mlp_config(m, 608),
                      "intermediate_size: expected 407 (expansion 0.67 x d_model 608, rounded up to a multiple of 1), got 400 "
                      "(give one of intermediate_size and expansion, or set the other to null)");
  Json none = {{"type", "none"}, {"multiple_of", 8}};
  REQUIRE_THROWS_WITH(resolve_mlp_config(none, 608), "multiple_of: cannot be used here: mlp type is \"none\"");
}

TEST_CASE("attention derives its sizes and checks the rules of attention.md 10", "[config][attention]") {
  LayerConfigContext ctx{.d_model = 768, .max_seq_len = 1024, .num_layers = 12, .layer_index = 0, .blocks = nullptr};
  Json m = {{"type", "attention"}, {"num_heads", 12}, {"num_kv_heads", 4}};
  resolve_attention_config(m, ctx);
  AttentionConfig a = attention_config_from_json(nlohmann::json(m));
  REQUIRE(a.head_dim == 64);
  REQUIRE(a.v_head_dim == 64);
  REQUIRE(a.num_kv_heads == 4);
  REQUIRE(*a.softmax_scale == 0.125);
  REQUIRE(a.rope_dim == 64);
  REQUIRE(a.max_position == 1024);
  REQUIRE(a.qk_norm_eps == 1e-5);

  auto err = [&](Json j) {
    try {
      resolve_attention_config(j, ctx);
    } catch (const ConfigKeyError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const Json base = {{"type", "attention"}, {"num_heads", 12}};
  auto with = [&](const char* k, Json v) {
    Json j = base;
    j[k] = v;
    return j;
  };
  REQUIRE(err({{"type", "attention"}}) == "num_heads: missing required key");
  REQUIRE(err(with("num_heads", nullptr)) == "num_heads: expected an integer >= 1, got null");
  REQUIRE(err(with("num_kv_heads", 5)) == "num_kv_heads: expected a divisor of num_heads (12), got 5");
  REQUIRE(err(with("head_dim", 65)) == "head_dim: expected an even integer <= 256, got 65");
  REQUIRE(err(with("head_dim", 258)) == "head_dim: expected an even integer <= 256, got 258");
  REQUIRE(err(with("v_head_dim", 33)) == "v_head_dim: expected an even integer <= 256, got 33");
  REQUIRE(err(with("rope_dim", 66)) == "rope_dim: expected an even integer <= head_dim (64), got 66");
  REQUIRE(err(with("rope_dim", 31)) == "rope_dim: expected an even integer <= head_dim (64), got 31");
  REQUIRE(err(with("window", -1)) == "window: expected an integer >= 0, got -1");
  REQUIRE(err(with("sinks", -4)) == "sinks: expected an integer >= 0, got -4");
  REQUIRE(err(with("window", 1.5)) == "window: expected an integer >= 0, got 1.5");
  REQUIRE(err(with("qk_norm", "RMS")) == "qk_norm: expected one of \"none\", \"rms\", got \"RMS\"");
  REQUIRE(err(with("rope", 1)) == "rope: expected true or false, got 1");
  REQUIRE(err(with("head_dim", nullptr)).empty());
  Json cosine = with("logits", "cosine");
  cosine["qk_norm"] = "rms";
  REQUIRE(err(cosine) == "qk_norm: expected \"none\" with logits \"cosine\", got \"rms\"");
  REQUIRE(err(with("rope_scaling", Json{{"type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 1},
                                         {"original_max_position", 8192}})) ==
          "rope_scaling.high_freq_factor: expected a number > low_freq_factor (4.0), got 1.0");
  REQUIRE(err(with("rope_scaling", Json{{"type", "llama3"}})) == "rope_scaling.factor: missing required key");
  // A rule that reads d_model reports the layer, not the value.
  LayerConfigContext odd = ctx;
  odd.d_model = 1000;
  try {
    Json j = base;
    resolve_attention_config(j, odd);
    FAIL("no error");
  } catch (const ConfigKeyError& e) {
    REQUIRE(e.scope() == ConfigKeyError::Scope::layer);
    REQUIRE(std::string(e.what()) == "num_heads: expected a divisor of d_model (1000) when head_dim is null, got 12");
  }
  Json cos = with("logits", "cosine");
  resolve_attention_config(cos, ctx);
  REQUIRE(cos["softmax_scale"].is_null());
}

TEST_CASE("the model configs of attention.md 7 resolve and resolve to themselves", "[config][resolve]") {
  const std::string rest = R"(, "data": {"train": "t.bin", "seq_len": 1024}, "train": {"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001}}})";
  const std::string gpt2 = R"({ "model": {
    "vocab_size": 50304, "d_model": 768, "num_layers": 12, "max_seq_len": 1024,
    "norm_eps": 1e-5, "tie_embeddings": true, "init_std": 0.02,
    "block": { "mixer": { "type": "attention", "num_heads": 12, "num_kv_heads": 12, "head_dim": 64,
                          "rope_theta": 10000.0, "window": 0, "sinks": 0 },
               "mlp":   { "type": "swiglu", "intermediate_size": 2048 } } })";
  const std::string swa = R"({ "model": { "vocab_size": 128256, "d_model": 2048, "num_layers": 16, "max_seq_len": 8192,
    "norm_eps": 1e-5, "tie_embeddings": true, "init_std": 0.02,
    "block": { "mixer": { "type": "attention", "num_heads": 32, "num_kv_heads": 8, "head_dim": 64,
                          "rope_theta": 500000.0, "window": 512, "sinks": 64 },
               "mlp":   { "type": "swiglu", "intermediate_size": 8192 } },
    "overrides": [ { "layers": "5,11,15", "mixer": { "window": 0, "sinks": 0 } } ] })";
  RunConfig a = resolve_no_files(gpt2 + rest);
  REQUIRE(a.model.layers[0].mlp.intermediate_size == 2048);
  REQUIRE(a.model.layers[0].mixer["softmax_scale"].get<double>() == 0.125);
  require_idempotent(a, ResolveOptions{.check_files = false});
  // The GPT-2 model spells out what the defaults would give: the same config without those keys hashes the same.
  RunConfig bare = resolve_no_files(R"({ "model": { "d_model": 768, "num_layers": 12,
    "block": { "mixer": { "type": "attention", "num_heads": 12 } } })" + rest);
  REQUIRE(bare.sha256 == a.sha256);
  RunConfig b = resolve_no_files(swa + rest);
  REQUIRE(b.model.vocab_size == 128256);
  REQUIRE(b.model.layers[0].mixer["max_position"] == 8192);
  int full = 0;
  for (const LayerConfig& l : b.model.layers) full += l.mixer["window"] == 0 && l.mixer["sinks"] == 0;
  REQUIRE(full == 3);
  REQUIRE(b.model.layers[11].mixer["window"] == 0);
  REQUIRE(b.model.layers[12].mixer["sinks"] == 64);
  require_idempotent(b, ResolveOptions{.check_files = false});
  for (auto [d, ffn, hq, hkv, dh, layers] : std::vector<std::array<int, 6>>{{1024, 3072, 16, 4, 64, 8}, {1536, 4096, 24, 8, 64, 14},
                                                                          {3072, 8192, 32, 8, 96, 28}}) {
    RunConfig llama = resolve_no_files(str_cat(R"({ "model": { "vocab_size": 128256, "d_model": )", d, R"(, "num_layers": )", layers,
                                               R"(, "max_seq_len": 8192, "block": { "mixer": { "type": "attention", "num_heads": )", hq,
                                               R"(, "num_kv_heads": )", hkv, R"(, "head_dim": )", dh,
                                               R"(, "rope_theta": 500000.0 }, "mlp": { "type": "swiglu", "intermediate_size": )", ffn,
                                               " } } }", rest));
    REQUIRE(llama.model.num_layers() == layers);
    REQUIRE(llama.model.layers[0].mlp.intermediate_size == ffn);
    require_idempotent(llama, ResolveOptions{.check_files = false});
  }
}
