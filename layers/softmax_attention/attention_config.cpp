// The attention mixer's keys (attention.md 10) and its rules. The head dims must be even and at
// most 256 whether given or derived: the kernels pair dims for RoPE and size their tiles for 256.
#include "layers/softmax_attention/attention_config.h"

#include <cmath>

namespace hyb {

const KeyTable kRopeScalingKeys{"rope_scaling", nullptr, {
    {.name = "type", .type = KeyType::enumeration, .required = true, .values = {"llama3"},
     .doc = "Llama-3 frequency scaling (attention.md 5)"},
    {.name = "factor", .type = KeyType::number, .required = true, .range = Range::above(0), .doc = "s"},
    {.name = "low_freq_factor", .type = KeyType::number, .required = true, .range = Range::above(0), .doc = "lf"},
    {.name = "high_freq_factor", .type = KeyType::number, .required = true, .range = Range::above(0),
     .doc = "hf, above low_freq_factor"},
    {.name = "original_max_position", .type = KeyType::integer, .required = true, .range = Range::at_least(1),
     .doc = "L0"},
}};

const KeyTable kAttentionKeys{"attention", nullptr, {
    {.name = "type", .type = KeyType::enumeration, .required = true, .values = {"attention"},
     .doc = "softmax attention: full causal, sliding window, sinks, scaled-cosine logits"},
    {.name = "num_heads", .type = KeyType::integer, .required = true, .range = Range::at_least(1),
     .doc = "Hq (required; null is an error)"},
    {.name = "num_kv_heads", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: num_heads", .doc = "Hkv; must divide num_heads"},
    {.name = "head_dim", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: d_model / num_heads", .doc = "D of q and k; even and <= 256; d_model must divide by num_heads when null"},
    {.name = "v_head_dim", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: head_dim", .doc = "Dv; even and <= 256"},
    {.name = "qkv_bias", .type = KeyType::boolean, .default_value = false, .doc = "biases on q, k and v"},
    {.name = "o_bias", .type = KeyType::boolean, .default_value = false, .doc = "bias on o"},
    {.name = "qk_norm", .type = KeyType::enumeration, .default_value = "none", .values = {"none", "rms"},
     .doc = "per-head RMSNorm of q and k (gains `q_norm.weight`, `k_norm.weight`)"},
    {.name = "qk_norm_eps", .type = KeyType::number, .default_value = 1e-5, .range = Range::above(0),
     .doc = "eps of the qk-norm"},
    {.name = "logits", .type = KeyType::enumeration, .default_value = "dot", .values = {"dot", "cosine"},
     .doc = "\"cosine\": scaled-cosine logits (attention.md 2.4); requires qk_norm \"none\" and ignores softmax_scale"},
    {.name = "softmax_scale", .type = KeyType::number, .null = Null::derived, .range = Range::above(0),
     .default_doc = "null: 1/sqrt(head_dim) (stays null with cosine logits)", .doc = "scale of the dot-product logits"},
    {.name = "cosine_logit_scale_init", .type = KeyType::number, .default_value = 10.0, .range = Range::above(0),
     .doc = "tau at init (theta = ln init)"},
    {.name = "cosine_logit_scale_max", .type = KeyType::number, .default_value = 100.0, .range = Range::above(0),
     .doc = "clamp of tau (theta <= ln max)"},
    {.name = "window", .type = KeyType::integer, .default_value = 0, .range = Range::at_least(0),
     .doc = "0: full causal; w > 0: the w most recent positions including self"},
    {.name = "sinks", .type = KeyType::integer, .default_value = 0, .range = Range::at_least(0),
     .doc = "the first S positions stay visible (matters with window > 0)"},
    {.name = "rope", .type = KeyType::boolean, .default_value = true, .doc = "apply RoPE to q and k"},
    {.name = "rope_theta", .type = KeyType::number, .default_value = 10000.0, .range = Range::above(0),
     .doc = "RoPE base"},
    {.name = "rope_dim", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: head_dim", .doc = "rotary width; even and <= head_dim"},
    {.name = "rope_scaling", .type = KeyType::object, .null = Null::off, .table = &kRopeScalingKeys,
     .doc = "null: off; Llama-3 frequency scaling (keys below)"},
    {.name = "max_position", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: model.max_seq_len", .doc = "RoPE table length"},
    {.name = "deterministic", .type = KeyType::boolean, .default_value = false,
     .doc = "atomic-free dQ in the backward (attention.md 4.2)"},
}};

namespace {

// head_dim and v_head_dim: even (RoPE pairs) and at most 256. A derived value is the model's doing,
// so it is reported at the layer with the fix.
void check_head_dim(const char* key, int64_t d, const Json& written, const char* derived_from) {
  if (d % 2 == 0 && d <= 256) return;
  if (written.is_null())
    throw ConfigKeyError(key, expected_problem("an even integer <= 256", d) + str_cat(" (", derived_from, "; give ", key, ")"),
                         ConfigKeyError::Scope::layer);
  throw ConfigKeyError(key, expected_problem("an even integer <= 256", written));
}

}  // namespace

void resolve_attention_config(Json& mixer, const LayerConfigContext& ctx) {
  Json m = apply_key_table(kAttentionKeys, mixer, "");
  const int64_t hq = json_int(m["num_heads"]);

  if (m["num_kv_heads"].is_null()) m["num_kv_heads"] = hq;
  if (hq % json_int(m["num_kv_heads"]) != 0)
    throw ConfigKeyError("num_kv_heads", expected_problem(str_cat("a divisor of num_heads (", hq, ")"), m["num_kv_heads"]));

  const Json head_dim_written = m["head_dim"];
  if (head_dim_written.is_null()) {
    if (ctx.d_model % hq != 0)
      throw ConfigKeyError("num_heads",
                           expected_problem(str_cat("a divisor of d_model (", ctx.d_model, ") when head_dim is null"), hq),
                           ConfigKeyError::Scope::layer);
    m["head_dim"] = ctx.d_model / hq;
  }
  const int64_t d = json_int(m["head_dim"]);
  check_head_dim("head_dim", d, head_dim_written, "d_model / num_heads");
  const Json v_head_dim_written = m["v_head_dim"];
  if (v_head_dim_written.is_null()) m["v_head_dim"] = d;
  check_head_dim("v_head_dim", json_int(m["v_head_dim"]), v_head_dim_written, "head_dim");

  if (m["logits"] == "cosine" && m["qk_norm"] != "none")
    throw ConfigKeyError("qk_norm", expected_problem("\"none\" with logits \"cosine\"", m["qk_norm"]));
  if (m["softmax_scale"].is_null() && m["logits"] == "dot") m["softmax_scale"] = 1.0 / std::sqrt(double(d));

  if (m["rope_dim"].is_null()) m["rope_dim"] = d;
  const int64_t r = json_int(m["rope_dim"]);
  if (r % 2 != 0 || r > d)
    throw ConfigKeyError("rope_dim", expected_problem(str_cat("an even integer <= head_dim (", d, ")"), m["rope_dim"]));

  const Json& scaling = m["rope_scaling"];
  if (!scaling.is_null() && !(scaling["high_freq_factor"].get<double>() > scaling["low_freq_factor"].get<double>()))
    throw ConfigKeyError("rope_scaling.high_freq_factor",
                         expected_problem(str_cat("a number > low_freq_factor (", scaling["low_freq_factor"].dump(), ")"),
                                          scaling["high_freq_factor"]));

  if (m["max_position"].is_null()) m["max_position"] = ctx.max_seq_len;
  mixer = std::move(m);
}

}  // namespace hyb
