// Decoding PHA blocks on the CPU in f64 (specs/pha.md 4.4, 14 item 6): the parallel mixer decodes
// to its forward from the first token and after prefills, with the state size of the KV cache plus
// the GSS modal state; small models of parallel, sequential and mixed PHA and attention layers decode
// token by token and after prefills to the parallel forward's logits (1e-12).
#include <catch2/catch.hpp>

#include "layers/pha/pha_cases.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

json sequential_written(const json& changes = json::object()) {
  json w = pha_small_written({{"composition", "sequential"}});
  w.erase("aux_mlp");
  w.merge_patch(changes);
  return w;
}

}  // namespace

TEST_CASE("the parallel PHA mixer decodes to its forward for every branch subset; its state is the KV cache plus "
          "Hs Ns complex values a sequence",
          "[pha][cpu][decode]") {
  // The attention cache holds max_seq_len 64 slots of one kv head, keys and values of 4; GSS Hs 4, Ns 3.
  const int64_t B = 2, slots = 64, Hkv = 1, D = 4, Hs = 4, Ns = 3, f64 = 8;
  const int64_t kv = B * slots * Hkv * 2 * D * f64, gss = B * Hs * Ns * 2 * f64;
  struct Case {
    std::string name;
    json written;
    int64_t bytes;
  };
  for (const Case& c : {Case{"attn gss ffn", pha_small_written(), kv + gss},
                        Case{"gss ffn", pha_small_written({{"branches", {"gss", "ffn"}}}), gss},
                        Case{"gss linear", pha_small_written({{"branches", {"gss"}}, {"gss", {{"lambda_imag", "linear"}}}}), gss},
                        Case{"attn ffn", pha_small_written({{"branches", {"attn", "ffn"}}}), kv}}) {
    ParameterScope scope(Device::cpu(), DType::f64);
    PhaMixer mixer(pha_config_from_json(pha_resolved(c.written), 8),
                   test_mixer_context({.d_model = 8, .max_seq_len = 64, .num_layers = 2}), 1e-6);
    mixer.initialize(3);
    randomize_parameters(mixer, 4);
    require_mixer_decode_matches_forward(mixer, {.prefills = {0, 1, 6, 23}, .state_bytes = c.bytes, .name = c.name + " "});
  }
}

TEST_CASE("a model of parallel PHA blocks decodes token by token and after prefills to the parallel forward's logits",
          "[pha][model][cpu][decode]") {
  require_decode_matches_forward(small_decode_lm({{pha_resolved(pha_small_written()), "swiglu", 12},
                                                  {pha_resolved(pha_small_written({{"residual", {{"source", "raw"}}}})), "swiglu", 12}}));
}

TEST_CASE("a model of sequential PHA blocks decodes token by token and after prefills to the parallel forward's logits",
          "[pha][model][cpu][decode]") {
  require_decode_matches_forward(small_decode_lm({{pha_resolved(sequential_written()), "swiglu", 12},
                                                  {pha_resolved(sequential_written({{"residual", {{"source", "raw"}}}})), "none", 0}}));
}

TEST_CASE("a model mixing attention, parallel and sequential PHA blocks and branch subsets decodes to the parallel "
          "forward's logits",
          "[pha][model][cpu][decode]") {
  const int64_t L = 5;
  const json attention = resolve_test_mixer("attention", {{"num_heads", 2}, {"num_kv_heads", 1}, {"head_dim", 4}}, {});
  require_decode_matches_forward(small_decode_lm({
      {pha_resolved(pha_small_written(), 8, L), "swiglu", 12},
      {attention, "swiglu", 12},
      {pha_resolved(pha_small_written({{"branches", {"gss", "ffn"}}, {"gss", {{"lambda_imag", "linear"}}}}), 8, L), "none", 0},
      {pha_resolved(sequential_written(), 8, L), "swiglu", 12},
      {pha_resolved(pha_small_written({{"branches", {"attn"}}, {"residual", {{"kind", "plain"}}}}), 8, L), "swiglu", 12},
  }));
}
