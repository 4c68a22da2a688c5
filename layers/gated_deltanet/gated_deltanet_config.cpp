// The Gated DeltaNet mixer's keys (gated_deltanet.md 7) and its rules. One departure from the spec's
// table: initializer_range defaults to null = model.init_std (0.02 unless changed), which is
// config.md 3.8's reading of a family rule written "N(0, 0.02)".
#include "layers/gated_deltanet/gated_deltanet_config.h"

#include <cmath>

namespace hyb {

const KeyTable kGatedDeltaNetKeys{"gated_deltanet", nullptr, {
    {.name = "type", .type = KeyType::enumeration, .required = true, .values = {"gated_deltanet"},
     .doc = "Gated DeltaNet: q/k/v with short convs, L2-normalised q and k, gated delta rule, norm-then-gate output"},
    mixer_d_model_key(),
    {.name = "num_heads", .type = KeyType::integer, .default_value = 6, .range = Range::at_least(1),
     .doc = "H, q/k heads (NAtS-L: 6)"},
    {.name = "num_v_heads", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: num_heads", .doc = "HV value heads; a multiple of num_heads (GVA: value head j reads q/k head j / (HV / H))"},
    {.name = "head_dim", .type = KeyType::integer, .default_value = 256, .range = Range::at_least(1),
     .doc = "K; FLA's guidance num_heads * head_dim = 0.75 d_model"},
    {.name = "expand_v", .type = KeyType::number, .default_value = 2.0, .range = Range::above(0),
     .doc = "V = head_dim * expand_v, which must be an integer"},
    {.name = "use_short_conv", .type = KeyType::boolean, .default_value = true,
     .doc = "depthwise causal convs before SiLU; false: SiLU on the projections only"},
    {.name = "conv_size", .type = KeyType::integer, .default_value = 4, .range = Range::at_least(1), .doc = "W"},
    {.name = "conv_bias", .type = KeyType::boolean, .default_value = false, .doc = "bias in the short convs"},
    {.name = "use_gate", .type = KeyType::boolean, .default_value = true,
     .doc = "output gate g_proj with norm-then-gate; false: RMSNorm only"},
    {.name = "allow_neg_eigval", .type = KeyType::boolean, .default_value = false,
     .doc = "beta = 2 sigmoid(.) in (0, 2)"},
    {.name = "qk_l2norm_eps", .type = KeyType::number, .default_value = 1e-6, .range = Range::above(0),
     .doc = "eps added to the sum of squares in the L2 norm of q and k"},
    {.name = "scale", .type = KeyType::number, .null = Null::derived, .range = Range::above(0),
     .default_doc = "null: head_dim^(-1/2)", .doc = "scale of the read-out o = scale S^T q"},
    {.name = "norm_eps", .type = KeyType::number, .default_value = 1e-5, .range = Range::above(0),
     .doc = "eps of the output RMSNorm (FLA's model configs use 1e-6)"},
    {.name = "A_init_range", .type = KeyType::list, .default_value = Json::array({0.0, 16.0}),
     .range = Range::at_least(0), .elem = KeyType::number, .list_len = 2,
     .doc = "A0 ~ U(lo, hi], A_log = ln A0; lo < hi"},
    {.name = "dt_min", .type = KeyType::number, .default_value = 0.001, .range = Range::above(0),
     .doc = "dt_bias init: softplus(dt_bias) log-uniform in [dt_min, dt_max]"},
    {.name = "dt_max", .type = KeyType::number, .default_value = 0.1, .range = Range::above(0), .doc = "at least dt_min"},
    {.name = "dt_init_floor", .type = KeyType::number, .default_value = 1e-4, .range = Range::above(0),
     .doc = "lower bound of the initial dt"},
    {.name = "initializer_range", .type = KeyType::number, .null = Null::derived, .range = Range::above(0),
     .default_doc = "null: model.init_std", .doc = "std of the N(0, std^2) init of the projection and conv weights"},
    {.name = "chunk_size", .type = KeyType::integer, .default_value = 64, .check = check_chunk_size_16_32_64,
     .type_doc = "16, 32 or 64", .doc = "C of the chunked CUDA kernels (the CPU runs the recurrent form)"},
}};

void resolve_gated_deltanet_config(Json& mixer, const LayerConfigContext& ctx) {
  Json m = apply_key_table(kGatedDeltaNetKeys, mixer, "");
  resolve_mixer_d_model(m, ctx);
  const int64_t h = json_int(m["num_heads"]), k = json_int(m["head_dim"]);
  if (m["num_v_heads"].is_null()) m["num_v_heads"] = h;
  if (json_int(m["num_v_heads"]) % h != 0)
    throw ConfigKeyError("num_v_heads", expected_problem(str_cat("a multiple of num_heads (", h, ")"), m["num_v_heads"]));
  const double v = m["expand_v"].get<double>() * double(k);
  if (std::floor(v) != v)
    throw ConfigKeyError("expand_v", expected_problem(str_cat("a number whose product with head_dim (", k,
                                                              ") is an integer"), m["expand_v"]));
  if (m["scale"].is_null()) m["scale"] = 1.0 / std::sqrt(double(k));
  const Json& a = m["A_init_range"];
  if (!(a[0].get<double>() < a[1].get<double>()))
    throw ConfigKeyError("A_init_range", expected_problem("[lo, hi] with 0 <= lo < hi", a));
  if (!(m["dt_min"].get<double>() <= m["dt_max"].get<double>()))
    throw ConfigKeyError("dt_max", expected_problem(str_cat("a number >= dt_min (", m["dt_min"].dump(), ")"), m["dt_max"]));
  if (m["initializer_range"].is_null()) m["initializer_range"] = ctx.init_std;
  mixer = std::move(m);
}

}  // namespace hyb
