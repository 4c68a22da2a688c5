// The GSA mixer on the CPU: parameter and input gradients (gsa.md 7.5), parameter names and count
// (5.1), decoding from the carried memories (6, 7.4) at the mixer and the model level, and the config
// rules (8).
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/gsa/gsa.h"
#include "layers/gsa/gsa_config.h"
#include "layers/mixer_test_util.h"
#include "layers/model/causal_lm.h"
#include "layers/registry.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

json resolved(const json& written, int64_t d_model) {
  return resolve_test_mixer("gsa", written, {.d_model = d_model, .max_seq_len = 64});
}

MixerContext mixer_context(int64_t d_model, int64_t num_layers = 1, const std::string& init = "family") {
  return test_mixer_context({.d_model = d_model, .max_seq_len = 64, .num_layers = num_layers}, init, true);
}

std::string error_of(const json& mixer, int64_t d_model) {
  return config_error([&] { resolved(mixer, d_model); });
}

}  // namespace

TEST_CASE("every GSA parameter and the layer input have gradients matching finite differences", "[gsa][cpu][grad]") {
  // gsa.md 7.5: small d, Hq 4, Hkv 2, M 3, T 11.
  const std::vector<std::pair<std::string, json>> variants = {
      {"GQA", {{"num_heads", 4}, {"num_kv_heads", 2}, {"num_slots", 3}}},
      {"short convs with bias, expand_v 1.5",
       {{"num_heads", 2}, {"num_slots", 3}, {"use_short_conv", true}, {"conv_bias", true}, {"expand_v", 1.5}}},
      {"fixed norm gain, scale null", {{"num_heads", 2}, {"num_slots", 2}, {"elementwise_affine", false}, {"scale", nullptr}}},
      {"relu feature map", {{"num_heads", 2}, {"num_slots", 3}, {"feature_map", "relu"}}},
      {"t2r feature map with short convs", {{"num_heads", 2}, {"num_slots", 3}, {"feature_map", "t2r"}, {"use_short_conv", true}}},
  };
  require_mixer_gradchecks(variants, 8, 11, [](const json& mixer, int64_t d) -> std::unique_ptr<Mixer> {
    return std::make_unique<GsaMixer>(gsa_config_from_json(resolved(mixer, d)), mixer_context(d));
  });
}

TEST_CASE("GSA has FLA's parameter names and the count of gsa.md 5.1", "[gsa][cpu]") {
  // FLA 1.3B default: d 2048, Hq = Hkv = 4, K = V = 512, M = 64 -> 17.3 M per layer:
  // d (Hq K + Hkv K + Hkv V + Hkv M) + d Hq V + Hq V.
  GsaMixer layer(gsa_config_from_json(resolved({}, 2048)), mixer_context(2048));
  const int64_t d = 2048;
  REQUIRE(layer.num_parameters() == d * (2048 + 2048 + 2048 + 256) + d * 2048 + 2048);
  std::vector<std::string> names, decayed;
  for (const auto& p : layer.named_parameters()) {
    names.push_back(p.name);
    if (p.decay) decayed.push_back(p.name);
  }
  REQUIRE(names == std::vector<std::string>{"g_norm.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
                                            "f_proj.weight", "o_proj.weight"});
  REQUIRE(decayed == std::vector<std::string>{"q_proj.weight", "k_proj.weight", "v_proj.weight", "f_proj.weight",
                                              "o_proj.weight"});
}

TEST_CASE("GSA feature maps: relu and t2r change the layer, t2r adds one shared K x K matrix", "[gsa][cpu]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  auto build = [](const char* fm) {
    auto layer = std::make_unique<GsaMixer>(gsa_config_from_json(resolved({{"num_heads", 2}, {"num_slots", 3}, {"feature_map", fm}}, 8)),
                                            mixer_context(8));
    layer->initialize(1);
    randomize_parameters(*layer, 2);
    return layer;
  };
  auto swish = build("swish"), relu_fm = build("relu"), t2r = build("t2r");
  REQUIRE(t2r->num_parameters() == swish->num_parameters() + 4 * 4);  // K = 8 / 2
  bool found = false;
  for (const auto& p : t2r->named_parameters())
    if (p.name == "feature_map.layer.weight") found = p.var.shape() == Shape{4, 4};
  REQUIRE(found);
  const Tensor x = random_tensor({1, 9, 8}, 3);
  const auto a = swish->forward(Var(x)).data().to_double_vector(), b = relu_fm->forward(Var(x)).data().to_double_vector(),
             c = t2r->forward(Var(x)).data().to_double_vector();
  REQUIRE(a != b);
  REQUIRE(b != c);
}

TEST_CASE("GSA decoding from the carried memories equals the full forward: single steps and prefills of 0, 1, 3, 17",
          "[gsa][cpu][decode]") {
  for (bool convs : {false, true}) {
    ParameterScope f64(Device::cpu(), DType::f64);
    GsaMixer layer(gsa_config_from_json(resolved({{"num_heads", 4}, {"num_kv_heads", 2}, {"num_slots", 5},
                                                  {"use_short_conv", convs}}, 8)),
                   mixer_context(8));
    layer.initialize(7);
    randomize_parameters(layer, 8);
    // Constant size: Hkv M (K + V) memory values (+ the conv inputs), gsa.md 6.
    const int64_t B = 2, Hkv = 2, K = 2, V = 2, M = 5, W = 4;
    require_mixer_decode_matches_forward(
        layer, {.prefills = {0, 1, 3, 17},
                .state_bytes = B * (Hkv * M * (K + V) + (convs ? (4 * K + 2 * K + 2 * V) * (W - 1) : 0)) * int64_t(sizeof(double)),
                .name = convs ? "convs " : "no convs "});
  }
}

TEST_CASE("a model of GSA and attention layers decodes token by token to the parallel forward's logits",
          "[gsa][model][cpu][decode]") {
  const json attention = resolve_test_mixer("attention", {{"num_heads", 2}, {"head_dim", 4}, {"window", 4}}, {});
  require_decode_matches_forward(small_decode_lm({
      {resolved({{"num_heads", 2}, {"num_slots", 4}}, 8), "swiglu", 12},
      {attention, "swiglu", 12},
      {resolved({{"num_heads", 2}, {"num_kv_heads", 1}, {"num_slots", 3}, {"use_short_conv", true}}, 8), "none", 0}}));
}

TEST_CASE("the gsa config derives heads, slots and scale and rejects what does not fit", "[gsa][config]") {
  const json r = resolved({{"num_heads", 4}, {"num_slots", nullptr}, {"scale", nullptr}}, 256);
  REQUIRE(r["num_kv_heads"] == 4);
  REQUIRE(r["num_slots"] == 64);
  REQUIRE(r["scale"].get<double>() == Approx(0.125).epsilon(1e-15));
  REQUIRE(resolved({}, 256)["num_slots"] == 64);
  REQUIRE(resolved({}, 256)["scale"] == 1.0);
  // save_chunk_states reaches the layer (it was once accepted and dropped): off by default (gsa.md 8).
  REQUIRE_FALSE(gsa_config_from_json(resolved({}, 256)).save_chunk_states);
  REQUIRE(gsa_config_from_json(resolved({{"save_chunk_states", true}}, 256)).save_chunk_states);
  REQUIRE_THAT(error_of({{"num_heads", 4}, {"num_kv_heads", 3}}, 64), Catch::Contains("num_kv_heads") && Catch::Contains("(4)"));
  REQUIRE_THAT(error_of({{"num_heads", 3}}, 64), Catch::Contains("expand_k") && Catch::Contains("num_heads (3)"));
  REQUIRE_THAT(error_of({{"chunk_size", 128}}, 64), Catch::Contains("chunk_size") && Catch::Contains("16, 32 or 64"));
  REQUIRE_THAT(error_of({{"use_norm", false}}, 64), Catch::Contains("use_norm"));
  REQUIRE_THAT(error_of({{"use_output_gate", true}}, 64), Catch::Contains("use_output_gate"));
  REQUIRE_THAT(error_of({{"feature_map", "elu"}}, 64), Catch::Contains("feature_map"));
  REQUIRE_THAT(error_of({{"gate_logit_normalizer", 0}}, 64), Catch::Contains("gate_logit_normalizer"));
}
