// The Mamba2 mixer's keys (mamba2.md 7) and its rules: d_ssm a multiple of headdim, ngroups
// dividing the head count, ordered ranges. Derived values are written out, so the resolved object
// says which width and head count the layer was built with.
#include "layers/mamba2/mamba2_config.h"

#include <cmath>

namespace hyb {

namespace {

// [lo, hi] with 0 <= lo <= hi; hi may be null (+inf). The dt clamp of mamba2.md 2.2 step 4.
Json check_dt_limit(const Json& v, const std::string& path) {
  const char* what = "a list [lo, hi] of numbers with 0 <= lo <= hi (hi null: no upper bound)";
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !(v[1].is_number() || v[1].is_null()))
    throw ConfigKeyError(path, expected_problem(what, v));
  const double lo = v[0].get<double>(), hi = v[1].is_null() ? INFINITY : v[1].get<double>();
  if (!(lo >= 0) || !(lo <= hi)) throw ConfigKeyError(path, expected_problem(what, v));
  return Json::array({lo, v[1].is_null() ? Json() : Json(hi)});
}

// The chunk lengths the CUDA kernels are instantiated for (mamba2.md 7).
Json check_chunk_size(const Json& v, const std::string& path) {
  const int64_t c = json_int(v);
  if (c != 64 && c != 128 && c != 256) throw ConfigKeyError(path, expected_problem("64, 128 or 256", v));
  return v;
}

}  // namespace

const KeyTable kMamba2Keys{"mamba2", nullptr, {
    {.name = "type", .type = KeyType::enumeration, .required = true, .values = {"mamba2"},
     .doc = "Mamba2 (SSD): in_proj, short conv, selective state space with scalar decay per head, gated RMSNorm"},
    mixer_d_model_key(),
    {.name = "expand", .type = KeyType::number, .default_value = 2.0, .range = Range::above(0),
     .doc = "d_ssm = expand * d_model when d_ssm is null"},
    {.name = "d_ssm", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: expand * d_model", .doc = "SSM width; a multiple of headdim; H = d_ssm / headdim"},
    {.name = "headdim", .type = KeyType::integer, .default_value = 64, .range = Range::at_least(1),
     .doc = "P; the Meta presets use 128 (192 at 3B)"},
    {.name = "d_state", .type = KeyType::integer, .default_value = 128, .range = Range::at_least(1), .doc = "N"},
    {.name = "ngroups", .type = KeyType::integer, .default_value = 1, .range = Range::at_least(1),
     .doc = "G groups of B and C; divides H; head h reads group h / (H / G)"},
    {.name = "d_conv", .type = KeyType::integer, .default_value = 4, .range = Range::at_least(1), .doc = "W"},
    {.name = "conv_bias", .type = KeyType::boolean, .default_value = true, .doc = "bias of the depthwise conv"},
    {.name = "conv_init", .type = KeyType::number, .null = Null::off, .range = Range::above(0),
     .doc = "null: PyTorch's conv init U(-1/sqrt(W), 1/sqrt(W)); x: conv weights ~ U(-x, x)"},
    {.name = "bias", .type = KeyType::boolean, .default_value = false, .doc = "biases of in_proj and out_proj"},
    {.name = "A_init_range", .type = KeyType::list, .default_value = Json::array({1.0, 16.0}), .range = Range::above(0),
     .elem = KeyType::number, .list_len = 2, .doc = "A0 ~ U(lo, hi), A_log = ln A0; lo <= hi"},
    {.name = "dt_min", .type = KeyType::number, .default_value = 0.001, .range = Range::above(0),
     .doc = "dt_bias init: softplus(dt_bias) log-uniform in [dt_min, dt_max]"},
    {.name = "dt_max", .type = KeyType::number, .default_value = 0.1, .range = Range::above(0), .doc = "at least dt_min"},
    {.name = "dt_init_floor", .type = KeyType::number, .default_value = 1e-4, .range = Range::above(0),
     .doc = "lower bound of the initial dt"},
    {.name = "dt_limit", .type = KeyType::custom, .default_value = Json::array({0.0, nullptr}), .check = check_dt_limit,
     .type_doc = "a list [lo, hi], hi a number or null", .default_doc = "`[0.0, null]`",
     .doc = "runtime clamp of dt (no gradient where active); null upper bound = +inf"},
    {.name = "D_has_hdim", .type = KeyType::boolean, .default_value = false,
     .doc = "D per channel (d_ssm) instead of per head"},
    {.name = "rmsnorm", .type = KeyType::boolean, .default_value = true,
     .doc = "gated RMSNorm on; false: y .* silu(z) without a norm"},
    {.name = "norm_before_gate", .type = KeyType::boolean, .default_value = false,
     .doc = "false: RMSNorm(y .* silu(z)); true: RMSNorm(y) .* silu(z); groups of d_ssm / ngroups channels"},
    {.name = "norm_eps", .type = KeyType::number, .default_value = 1e-5, .range = Range::above(0),
     .doc = "eps of the gated RMSNorm"},
    {.name = "chunk_size", .type = KeyType::integer, .default_value = 256, .check = check_chunk_size,
     .type_doc = "64, 128 or 256", .doc = "C of the chunked CUDA kernels; results equal up to rounding (the CPU runs the recurrent form)"},
    {.name = "out_proj_rescale", .type = KeyType::boolean, .default_value = true,
     .doc = "divide the out_proj init by sqrt(n_res * num_layers), n_res = 2 with an mlp in the block, else 1 (family init)"},
}};

void resolve_mamba2_config(Json& mixer, const LayerConfigContext& ctx) {
  Json m = apply_key_table(kMamba2Keys, mixer, "");
  resolve_mixer_d_model(m, ctx);

  const Json d_ssm_written = m["d_ssm"];
  if (d_ssm_written.is_null()) {
    const double width = m["expand"].get<double>() * double(ctx.d_model);
    if (std::floor(width) != width)
      throw ConfigKeyError("expand", expected_problem(str_cat("a number whose product with d_model (", ctx.d_model,
                                                              ") is an integer, or give d_ssm"), m["expand"]));
    m["d_ssm"] = int64_t(width);
  }
  const int64_t d_ssm = json_int(m["d_ssm"]), headdim = json_int(m["headdim"]);
  if (d_ssm % headdim != 0) {
    if (d_ssm_written.is_null())
      throw ConfigKeyError("headdim", expected_problem(str_cat("a divisor of d_ssm = expand * d_model (", d_ssm, ")"),
                                                       m["headdim"]));
    throw ConfigKeyError("d_ssm", expected_problem(str_cat("a multiple of headdim (", headdim, ")"), m["d_ssm"]));
  }
  const int64_t heads = d_ssm / headdim;
  if (heads % json_int(m["ngroups"]) != 0)
    throw ConfigKeyError("ngroups", expected_problem(str_cat("a divisor of the head count d_ssm / headdim (", heads, ")"),
                                                     m["ngroups"]));
  const Json& a = m["A_init_range"];
  if (!(a[0].get<double>() <= a[1].get<double>()))
    throw ConfigKeyError("A_init_range", expected_problem("[lo, hi] with 0 < lo <= hi", a));
  if (!(m["dt_min"].get<double>() <= m["dt_max"].get<double>()))
    throw ConfigKeyError("dt_max", expected_problem(str_cat("a number >= dt_min (", m["dt_min"].dump(), ")"), m["dt_max"]));
  mixer = std::move(m);
}

}  // namespace hyb
