// The pha mixer's keys (pha.md 10) and its rules. The attention and auxiliary-FFN objects are checked
// by their own families' resolvers, so attention's head-dim limits and config.md 3.4's width rule hold
// inside a PHA block without being restated. alpha and beta follow DeepNet's rule with M residual
// sublayers in the stack (pha.md 7.1, Choice 13): 2 per block in parallel, 3 in sequential.
#include "layers/pha/pha_config.h"

#include <cmath>

#include "core/param_glob.h"
#include "layers/mlp/mlp_config.h"
#include "layers/softmax_attention/attention_config.h"

namespace hyb {

namespace {

const char* const kBranchOrder[] = {"attn", "gss", "ffn"};

// A non-empty subset of attn, gss, ffn, stored in that order whatever order it was written in.
Json check_branches(const Json& v, const std::string& path) {
  const char* want = "a non-empty list of distinct \"attn\", \"gss\", \"ffn\"";
  if (!v.is_array() || v.empty()) throw ConfigKeyError(path, expected_problem(want, v));
  bool seen[3] = {false, false, false};
  for (const Json& b : v) {
    int k = -1;
    for (int i = 0; i < 3; ++i)
      if (b.is_string() && b.get<std::string>() == kBranchOrder[i]) k = i;
    if (k < 0 || seen[k]) throw ConfigKeyError(path, expected_problem(want, v));
    seen[k] = true;
  }
  Json out = Json::array();
  for (int i = 0; i < 3; ++i)
    if (seen[i]) out.push_back(kBranchOrder[i]);
  return out;
}

Json check_globs(const Json& v, const std::string& path) {
  if (!v.is_array()) throw ConfigKeyError(path, expected_problem("a list of parameter-name globs", v));
  for (size_t i = 0; i < v.size(); ++i) check_param_glob(v[i], str_cat(path, "[", i, "]"));
  return v;
}

Json as_written(const Json& v, const std::string&) { return v; }

// pha.md 7.4: the sublayers whose outputs enter a residual without a branch norm.
Json default_beta_targets(bool sequential) {
  if (!sequential) return Json::array({"model.layers.*.mlp.*"});
  return Json::array({"model.layers.*.mixer.attn.v_proj.weight", "model.layers.*.mixer.attn.o_proj.weight",
                      "model.layers.*.mixer.gss.to_u.weight", "model.layers.*.mixer.gss.to_gate.weight",
                      "model.layers.*.mixer.gss.to_out.weight", "model.layers.*.mlp.*"});
}

}  // namespace

const KeyTable kPhaResidualKeys{"pha residual", nullptr, {
    {.name = "kind", .type = KeyType::enumeration, .default_value = "deepnorm", .values = {"deepnorm", "plain"},
     .doc = "\"plain\": alpha = beta = 1 with raw residuals, the standard pre-norm network"},
    {.name = "source", .type = KeyType::enumeration, .null = Null::derived, .values = {"normed", "raw"},
     .default_doc = "null: \"normed\" (deepnorm), \"raw\" (plain)",
     .doc = "\"normed\": each residual is alpha times the sublayer's normalized input (pha.md 7.2); \"raw\": alpha times the block input"},
    {.name = "alpha", .type = KeyType::number, .null = Null::derived, .range = Range::above(0),
     .default_doc = "null: M^(1/4)", .doc = "residual scale; M = residual sublayers in the stack (2 per block, 3 sequential)"},
    {.name = "beta", .type = KeyType::number, .null = Null::derived, .range = Range::above(0),
     .default_doc = "null: (4M)^(-1/4)", .doc = "init-std factor of the beta targets"},
    {.name = "beta_targets", .type = KeyType::custom, .null = Null::derived, .check = check_globs,
     .type_doc = "a list of parameter-name globs", .default_doc = "null: pha.md 7.4's list",
     .doc = "the Linear weights whose init std is multiplied by beta"},
}};

const KeyTable kPhaMixKeys{"pha mix", nullptr, {
    {.name = "init", .type = KeyType::number, .default_value = 0.0, .doc = "initial value of every mixing logit"},
}};

const KeyTable kPhaGssKeys{"pha gss", nullptr, {
    {.name = "expand", .type = KeyType::integer, .default_value = 4, .range = Range::at_least(1), .doc = "F = expand d_model"},
    {.name = "dss_dim", .type = KeyType::integer, .default_value = 256, .range = Range::at_least(1), .doc = "Hs, the SSM width"},
    {.name = "dss_state", .type = KeyType::integer, .default_value = 512, .range = Range::at_least(1), .doc = "Ns, the modes"},
    {.name = "lambda_imag", .type = KeyType::enumeration, .default_value = "exp", .values = {"exp", "linear"},
     .doc = "omega = exp(Lambda_imag) or Lambda_imag (pha.md 4.3)"},
    {.name = "init", .type = KeyType::enumeration, .default_value = "random", .values = {"random", "s4d_lin"},
     .doc = "kernel init: i.i.d. N(0, 1), or S4D-Lin eigenvalues (requires lambda_imag \"linear\")"},
    {.name = "layernorm_eps", .type = KeyType::number, .default_value = 1e-5, .range = Range::above(0),
     .doc = "eps of the DSS LayerNorm"},
}};

const KeyTable kPhaKeys{"pha", "composition", {
    {.name = "type", .type = KeyType::enumeration, .required = true, .values = {"pha"},
     .doc = "the PHA block: attention, GSS and FFN branches, learnable static mixing, DeepNorm residuals"},
    {.name = "composition", .type = KeyType::enumeration, .default_value = "parallel", .values = {"parallel", "sequential"},
     .doc = "\"parallel\" (pha.md 2.2) or \"sequential\": attention, GSS, FFN one after another (11.1)"},
    {.name = "branches", .type = KeyType::custom, .default_value = Json::array({"attn", "gss", "ffn"}),
     .only_for = {"parallel"}, .check = check_branches, .type_doc = "a non-empty subset of \"attn\", \"gss\", \"ffn\"",
     .doc = "the kept branches, stored in the order attn, gss, ffn"},
    {.name = "dropout", .type = KeyType::number, .default_value = 0.1, .range = Range::closed_open(0, 1),
     .doc = "on the mixture and on the main FFN's output before their residuals (pha.md Choice 9)"},
    {.name = "residual", .type = KeyType::object, .default_value = Json::object(), .table = &kPhaResidualKeys,
     .doc = "DeepNorm (keys below)"},
    {.name = "mix", .type = KeyType::object, .default_value = Json::object(), .table = &kPhaMixKeys,
     .only_for = {"parallel"}, .doc = "the mixing logits (keys below)"},
    {.name = "attn", .type = KeyType::custom, .null = Null::off, .check = as_written, .type_doc = "an attention mixer object",
     .doc = "the attention branch (attention.md 10); required where it is kept"},
    {.name = "gss", .type = KeyType::object, .default_value = Json::object(), .table = &kPhaGssKeys,
     .doc = "the GSS branch (keys below)"},
    {.name = "aux_mlp", .type = KeyType::custom, .default_value = Json{{"type", "swiglu"}}, .only_for = {"parallel"},
     .check = as_written, .type_doc = "an mlp object (config.md 3.4)", .doc = "the auxiliary FFN branch"},
    {.name = "init", .type = KeyType::enumeration, .default_value = "xavier_normal", .values = {"xavier_normal", "gpt2"},
     .doc = "Linear weights Xavier-normal (pha.md 8) or attention.md 7's rule"},
}};

void resolve_pha_config(Json& mixer, const LayerConfigContext& ctx) {
  const bool source_written = mixer.is_object() && mixer.contains("residual") && mixer["residual"].is_object() &&
                              mixer["residual"].contains("source") && !mixer["residual"]["source"].is_null();
  Json m = apply_key_table(kPhaKeys, mixer, "");
  const bool sequential = m["composition"] == "sequential";
  auto kept = [&](const char* b) {
    if (sequential) return std::string(b) != "ffn";
    for (const Json& x : m["branches"])
      if (x == b) return true;
    return false;
  };

  Json& r = m["residual"];
  const bool plain = r["kind"] == "plain";
  if (plain && source_written && r["source"] == "normed")
    throw ConfigKeyError("residual.source", expected_problem("\"raw\" or null with kind \"plain\"", r["source"]) +
                                                " (a post-norm network without alpha is not a PHA variant)");
  if (r["source"].is_null()) r["source"] = plain ? "raw" : "normed";
  const double M = double((sequential ? 3 : 2) * ctx.num_layers);
  for (const char* key : {"alpha", "beta"}) {
    if (plain && !r[key].is_null() && r[key].get<double>() != 1.0)
      throw ConfigKeyError(str_cat("residual.", key), expected_problem("1 or null with kind \"plain\"", r[key]));
  }
  if (r["alpha"].is_null()) r["alpha"] = plain ? 1.0 : std::pow(M, 0.25);
  if (r["beta"].is_null()) r["beta"] = plain ? 1.0 : std::pow(4 * M, -0.25);
  if (r["beta_targets"].is_null()) r["beta_targets"] = default_beta_targets(sequential);

  Json& g = m["gss"];
  if (g["init"] == "s4d_lin" && g["lambda_imag"] == "exp")
    throw ConfigKeyError("gss.init", expected_problem("\"random\" with lambda_imag \"exp\" (s4d_lin needs \"linear\")", g["init"]));

  if (kept("attn")) {
    if (m["attn"].is_null()) throw ConfigKeyError("attn", missing_key_problem("the attention branch is kept"));
    require_object(m["attn"], "attn", "an attention mixer object");
    if (!m["attn"].contains("type")) m["attn"]["type"] = "attention";
    try {
      resolve_attention_config(m["attn"], ctx);
    } catch (const ConfigKeyError& e) {
      throw e.prefixed("attn");
    }
  } else if (!m["attn"].is_null()) {
    require_object(m["attn"], "attn", "an attention mixer object");
  }

  if (!sequential) {
    require_object(m["aux_mlp"], "aux_mlp", "an mlp object");
    try {
      resolve_mlp_config(m["aux_mlp"], ctx.d_model);
    } catch (const ConfigKeyError& e) {
      throw e.prefixed("aux_mlp");
    }
    if (kept("ffn") && m["aux_mlp"]["type"] != "swiglu")
      throw ConfigKeyError("aux_mlp.type", expected_problem("\"swiglu\" while the ffn branch is kept", m["aux_mlp"]["type"]));
  }
  mixer = std::move(m);
}

PhaConfig pha_config_from_json(const Json& m, int64_t d_model) {
  PhaConfig c;
  c.sequential = m.at("composition") == "sequential";
  if (!c.sequential) {
    c.attn = c.gss = c.ffn = false;
    for (const Json& b : m.at("branches")) {
      c.attn |= b == "attn";
      c.gss |= b == "gss";
      c.ffn |= b == "ffn";
    }
    c.mix_init = m.at("mix").at("init").get<double>();
    if (c.ffn) c.aux_hidden = json_int(m.at("aux_mlp").at("intermediate_size"));
  } else {
    c.ffn = false;
  }
  c.dropout = m.at("dropout").get<double>();
  const Json& r = m.at("residual");
  c.residual_normed = r.at("source") == "normed";
  c.alpha = r.at("alpha").get<double>();
  c.beta = r.at("beta").get<double>();
  for (const Json& g : r.at("beta_targets")) c.beta_targets.push_back(g.get<std::string>());
  if (c.attn) c.attn_mixer = m.at("attn");
  const Json& g = m.at("gss");
  c.gss_cfg.d_model = d_model;
  c.gss_cfg.wide = json_int(g.at("expand")) * d_model;
  c.gss_cfg.dss_dim = json_int(g.at("dss_dim"));
  c.gss_cfg.dss_state = json_int(g.at("dss_state"));
  c.gss_cfg.lambda_imag_exp = g.at("lambda_imag") == "exp";
  c.gss_cfg.s4d_lin_init = g.at("init") == "s4d_lin";
  c.gss_cfg.layernorm_eps = g.at("layernorm_eps").get<double>();
  c.xavier = m.at("init") == "xavier_normal";
  return c;
}

}  // namespace hyb
