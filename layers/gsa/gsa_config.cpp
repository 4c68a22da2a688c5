// The GSA mixer's keys (gsa.md 8) and its rules. Departure from the spec's table: d_model is a key
// like every other family's.
#include "layers/gsa/gsa_config.h"

#include <cmath>

namespace hyb {

namespace {

// A width that must be a whole number of heads: expand * d_model divisible by num_heads.
int64_t head_width(const Json& m, const char* key, int64_t d_model, int64_t heads) {
  const double w = m[key].get<double>() * double(d_model);
  if (std::floor(w) != w || int64_t(w) % heads != 0)
    throw ConfigKeyError(key, expected_problem(str_cat("a number whose product with d_model (", d_model,
                                                       ") is an integer divisible by num_heads (", heads, ")"),
                                               m[key]));
  return int64_t(w) / heads;
}

}  // namespace

const KeyTable kGsaKeys{"gsa", nullptr, {
    {.name = "type", .type = KeyType::enumeration, .required = true, .values = {"gsa"},
     .doc = "Gated Slot Attention: two gated linear attentions over M slots chained by a softmax, output RMSNorm"},
    mixer_d_model_key(),
    {.name = "num_heads", .type = KeyType::integer, .default_value = 4, .range = Range::at_least(1),
     .doc = "Hq, query heads"},
    {.name = "num_kv_heads", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: num_heads", .doc = "Hkv, key/value/slot heads; must divide num_heads"},
    {.name = "expand_k", .type = KeyType::number, .default_value = 1.0, .range = Range::above(0),
     .doc = "key_dim = expand_k d_model; K = key_dim / num_heads"},
    {.name = "expand_v", .type = KeyType::number, .default_value = 1.0, .range = Range::above(0),
     .doc = "value_dim = expand_v d_model; V = value_dim / num_heads"},
    {.name = "num_slots", .type = KeyType::integer, .default_value = 64, .null = Null::derived,
     .range = Range::at_least(1), .default_doc = "64 (null: K)", .doc = "M, memory slots per head"},
    {.name = "gate_logit_normalizer", .type = KeyType::number, .default_value = 8.0, .range = Range::above(0),
     .doc = "tau: g = logsigmoid(f_proj x) / tau, s = 1 - exp(g)"},
    {.name = "feature_map", .type = KeyType::enumeration, .default_value = "swish", .values = {"swish", "relu", "t2r"},
     .doc = "feature map on q and k: silu, relu, or t2r = relu(x W^T) with one shared K x K matrix"},
    {.name = "scale", .type = KeyType::number, .default_value = 1.0, .null = Null::derived, .range = Range::above(0),
     .default_doc = "1.0 (null: K^(-1/2))", .doc = "slot-logit scale (FLA's layer: 1.0)"},
    {.name = "use_short_conv", .type = KeyType::boolean, .default_value = false,
     .doc = "depthwise causal convs + SiLU on q, k, v before the feature maps"},
    {.name = "conv_size", .type = KeyType::integer, .default_value = 4, .range = Range::at_least(1), .doc = "W"},
    {.name = "conv_bias", .type = KeyType::boolean, .default_value = false, .doc = "bias in the short convs"},
    {.name = "elementwise_affine", .type = KeyType::boolean, .default_value = true,
     .doc = "learnable g_norm.weight (false: fixed 1)"},
    {.name = "norm_eps", .type = KeyType::number, .default_value = 1e-6, .range = Range::above(0),
     .doc = "eps of the output RMSNorm over all Hq V channels"},
    {.name = "use_norm", .type = KeyType::boolean, .default_value = true, .doc = "must be true (the path FLA runs)"},
    {.name = "use_output_gate", .type = KeyType::boolean, .default_value = false,
     .doc = "must be false (the path FLA runs)"},
    {.name = "chunk_size", .type = KeyType::integer, .default_value = 64, .check = check_chunk_size_16_32_64,
     .type_doc = "16, 32 or 64", .doc = "C of the chunked CUDA kernels (the CPU runs the recurrent form)"},
    {.name = "save_chunk_states", .type = KeyType::boolean, .default_value = false,
     .doc = "keep the chunk memories (bf16, 2 (K M + M V) bytes per 64 tokens and kv head) for the backward "
            "instead of recomputing them (fused CUDA path)"},
}};

void resolve_gsa_config(Json& mixer, const LayerConfigContext& ctx) {
  Json m = apply_key_table(kGsaKeys, mixer, "");
  resolve_mixer_d_model(m, ctx);
  const int64_t h = json_int(m["num_heads"]);
  if (m["num_kv_heads"].is_null()) m["num_kv_heads"] = h;
  if (h % json_int(m["num_kv_heads"]) != 0)
    throw ConfigKeyError("num_kv_heads", expected_problem(str_cat("a divisor of num_heads (", h, ")"), m["num_kv_heads"]));
  const int64_t K = head_width(m, "expand_k", ctx.d_model, h);
  head_width(m, "expand_v", ctx.d_model, h);
  if (m["num_slots"].is_null()) m["num_slots"] = K;
  if (m["scale"].is_null()) m["scale"] = 1.0 / std::sqrt(double(K));
  if (!m["use_norm"].get<bool>()) throw ConfigKeyError("use_norm", expected_problem("true", m["use_norm"]));
  if (m["use_output_gate"].get<bool>())
    throw ConfigKeyError("use_output_gate", expected_problem("false", m["use_output_gate"]));
  mixer = std::move(m);
}

}  // namespace hyb
