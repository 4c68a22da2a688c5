// The NHA mixer's keys (nha.md 10) and its rules. Departures from the spec's table: d_model is a key
// like every other family's; num_kv_heads and value_head_dim accept null (num_heads, head_dim);
// value_act takes "silu" or "none"; slot_feature_map "swish" (the 2026 refactor) is refused with
// pos_enc "rope_short_long", where neither the paper nor the official code says which comes first;
// save_chunk_states (gsa.md 8's key) and save_window_qk, not in nha.md, trade activation memory for the
// backward's recompute.
#include "layers/nha/nha_config.h"

#include <cmath>

namespace hyb {

const KeyTable kNhaKeys{"nha", nullptr, {
    {.name = "type", .type = KeyType::enumeration, .required = true, .values = {"nha"},
     .doc = "Native Hybrid Attention: gated slot memory and a sliding window read by one softmax"},
    mixer_d_model_key(),
    {.name = "num_heads", .type = KeyType::integer, .default_value = 16, .range = Range::at_least(1),
     .doc = "Hq, query heads"},
    {.name = "num_kv_heads", .type = KeyType::integer, .default_value = 16, .null = Null::derived,
     .range = Range::at_least(1), .default_doc = "16 (null: num_heads)",
     .doc = "Hkv, key/value/slot heads; must divide num_heads"},
    {.name = "head_dim", .type = KeyType::integer, .default_value = 64, .range = Range::at_least(1),
     .doc = "D of q and k (even with RoPE)"},
    {.name = "value_head_dim", .type = KeyType::integer, .default_value = 64, .null = Null::derived,
     .range = Range::at_least(1), .default_doc = "64 (null: head_dim)", .doc = "Dv"},
    {.name = "slots", .type = KeyType::integer, .default_value = 64, .range = Range::at_least(0),
     .doc = "M memory slots per kv head; 0 = \"w/o long memory\" (sliding-window attention)"},
    {.name = "window", .type = KeyType::integer, .default_value = 32, .range = Range::at_least(-1),
     .doc = "w recent tokens (the current one included); 0 = slots only; -1 or >= T = full attention + slots"},
    {.name = "token_shift", .type = KeyType::boolean, .default_value = true,
     .doc = "a token enters the slots when it leaves the window; false: at once (\"w/o token shift\")"},
    {.name = "window_includes_current", .type = KeyType::boolean, .default_value = true,
     .doc = "false: the window covers t-w..t, w+1 keys (the 2026 flash-attn convention)"},
    {.name = "fusion", .type = KeyType::enumeration, .default_value = "softmax",
     .values = {"softmax", "weighted_fixed", "weighted_learned"},
     .doc = "one softmax over slots and window, or a weighted sum of two separate softmaxes (nha.md 8.2)"},
    {.name = "fusion_weight", .type = KeyType::number, .default_value = 0.5, .range = Range::closed(0, 1),
     .doc = "weighted_fixed: lambda, the weight of the slot branch"},
    {.name = "pos_enc", .type = KeyType::enumeration, .default_value = "rope_short",
     .values = {"rope_short", "rope_short_long", "none", "learned_short"},
     .doc = "RoPE on the window only, on both branches, nowhere, or a learned bias per (head, distance) (nha.md 8.3)"},
    {.name = "rope_theta", .type = KeyType::number, .default_value = 10000.0, .range = Range::above(0),
     .doc = "RoPE base"},
    {.name = "scale", .type = KeyType::number, .null = Null::derived, .range = Range::above(0),
     .default_doc = "null: head_dim^(-1/2)", .doc = "scale of slot and window logits alike"},
    {.name = "slot_feature_map", .type = KeyType::enumeration, .default_value = "identity",
     .values = {"identity", "swish"},
     .doc = "feature map on the slot branch's q and k (paper era: identity; the 2026 layer: swish); the window reads them raw"},
    {.name = "gate_logit_normalizer", .type = KeyType::number, .default_value = 8.0, .range = Range::above(0),
     .doc = "tau: g = logsigmoid(f_proj x) / tau, s = 1 - exp(g)"},
    {.name = "value_act", .type = KeyType::enumeration, .default_value = "silu", .values = {"silu", "none"},
     .doc = "activation of v (both branches)"},
    {.name = "output_norm_eps", .type = KeyType::number, .default_value = 1e-5, .range = Range::above(0),
     .doc = "eps of the output RMSNorm over all Hq Dv channels"},
    {.name = "use_short_conv", .type = KeyType::boolean, .default_value = false,
     .doc = "depthwise causal convs + SiLU on q, k, v"},
    {.name = "conv_size", .type = KeyType::integer, .default_value = 4, .range = Range::at_least(1), .doc = "W"},
    {.name = "chunk_size", .type = KeyType::integer, .default_value = 64, .check = check_chunk_size_16_32_64,
     .type_doc = "16, 32 or 64", .doc = "C of the chunked CUDA kernel (the CPU runs the recurrent form)"},
    {.name = "emit_long_ratio", .type = KeyType::boolean, .default_value = false,
     .doc = "keep omega_L (the slots' share of the attention mass) per token and head for eval"},
    {.name = "save_chunk_states", .type = KeyType::boolean, .default_value = false,
     .doc = "keep the chunk memories (bf16, 2 (D M + M Dv) bytes per 64 tokens and kv head) for the backward "
            "instead of recomputing them (fused CUDA path; gsa's key)"},
    {.name = "save_window_qk", .type = KeyType::boolean, .default_value = false,
     .doc = "keep the window's RoPE'd q and k (the size of q and k) for the backward instead of rotating them again "
            "(CUDA)"},
}};

void resolve_nha_config(Json& mixer, const LayerConfigContext& ctx) {
  Json m = apply_key_table(kNhaKeys, mixer, "");
  resolve_mixer_d_model(m, ctx);
  const int64_t h = json_int(m["num_heads"]), D = json_int(m["head_dim"]);
  if (m["num_kv_heads"].is_null()) m["num_kv_heads"] = h;
  if (h % json_int(m["num_kv_heads"]) != 0)
    throw ConfigKeyError("num_kv_heads", expected_problem(str_cat("a divisor of num_heads (", h, ")"), m["num_kv_heads"]));
  if (m["value_head_dim"].is_null()) m["value_head_dim"] = D;
  if (m["scale"].is_null()) m["scale"] = 1.0 / std::sqrt(double(D));
  const std::string pos = m["pos_enc"].get<std::string>();
  if ((pos == "rope_short" || pos == "rope_short_long") && D % 2 != 0)
    throw ConfigKeyError("head_dim", expected_problem(str_cat("an even number with pos_enc \"", pos, "\""), m["head_dim"]));
  if (m["slot_feature_map"].get<std::string>() == "swish" && pos == "rope_short_long")
    throw ConfigKeyError("slot_feature_map", expected_problem("\"identity\" with pos_enc \"rope_short_long\" (RoPE and "
                                                              "swish on the slots have no defined order)", m["slot_feature_map"]));
  if (json_int(m["slots"]) == 0 && json_int(m["window"]) == 0 && m["window_includes_current"].get<bool>())
    throw ConfigKeyError("window", expected_problem("a window > 0 or -1 with slots = 0 (a layer needs slots or a window)",
                                                    m["window"]));
  mixer = std::move(m);
}

}  // namespace hyb
