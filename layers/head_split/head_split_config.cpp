// The head_split mixer's keys (intra_hybrid.md 4.8) and its rules. Sizes come from the resolved `T`
// and `M` blocks (each resolved by its own family, so their defaults and rules hold here too); the
// two halves are then checked as mixers of their own families, which brings attention's head-dim
// limits and Mamba2's divisibility rules to the X block without restating them. A resolved object
// holds every size, so it resolves to itself without the named blocks; the agreement of explicit
// sizes with dim_ratio is checked wherever those blocks are there to compare with.
#include "layers/head_split/head_split_config.h"

#include <optional>

#include "layers/mamba2/mamba2_config.h"
#include "layers/softmax_attention/attention_config.h"

namespace hyb {

namespace {

struct FusionPreset {
  const char* name;
  const char* norm;
  const char* scalar;
  const char* fusion;
  int64_t out_proj;
  std::optional<double> scale_init;  // set by the preset (Hymba's averaging), else the key's own
};

const FusionPreset kPresets[] = {
    {"hymba", "group", "scale", "add", 1, 0.5},
    {"nonorm_scale_add1", "none", "scale", "add", 1, std::nullopt},
    {"group_add1", "group", "none", "add", 1, std::nullopt},
    {"group_gate_add1", "group", "gate", "add", 1, std::nullopt},
    {"group_diff1", "group", "none", "diff", 1, std::nullopt},
    {"group_conc1", "group", "none", "conc", 1, std::nullopt},
    {"group_add2", "group", "none", "add", 2, std::nullopt},
    {"group_diff2", "group", "none", "diff", 2, std::nullopt},
};

KeySpec derived_size(const char* name, const char* from, const char* doc) {
  return {.name = name, .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1), .default_doc = from,
          .doc = doc};
}

}  // namespace

std::vector<std::string> head_split_preset_names() {
  std::vector<std::string> out;
  for (const FusionPreset& p : kPresets) out.emplace_back(p.name);
  return out;
}

const KeyTable kHeadSplitAttnKeys{"head_split attn", nullptr, {
    derived_size("num_heads", "null: n_T = num_heads of `T` * a / (a + b)", "n_T, query heads of the attention half"),
    derived_size("num_kv_heads", "null: num_heads / (the GQA group of `T`)", "n_kvT; divides num_heads"),
    derived_size("head_dim", "null: head_dim of `T`", "Dqk of q and k; even and <= 256"),
    derived_size("v_head_dim", "null: v_expand * head_dim", "Dv; even and <= 256"),
    {.name = "rope_theta", .type = KeyType::number, .default_value = 500000.0, .range = Range::above(0),
     .doc = "RoPE base, rotary over the whole head_dim"},
}};

const KeyTable kHeadSplitSsmKeys{"head_split ssm", nullptr, {
    derived_size("d_ssm", "null: d_ssmX = headdim * (heads of `M`) * b / (a + b)", "D_M, the width of the Mamba half"),
    derived_size("headdim", "null: headdim of `M`", "P"),
    derived_size("d_state", "null: d_state of `M`", "N"),
    derived_size("ngroups", "null: ngroups of `M`", "G; divides the head count d_ssm / headdim"),
    derived_size("d_conv", "null: d_conv of `M`", "W"),
    {.name = "chunk_size", .type = KeyType::integer, .default_value = 256, .type_doc = "64, 128 or 256",
     .doc = "C of the chunked CUDA kernels (mamba2's key and rule)"},
}};

const KeyTable kHeadSplitKeys{"head_split", "scalar", {
    {.name = "type", .type = KeyType::enumeration, .required = true, .values = {"head_split"},
     .doc = "head-split intra-layer hybrid: half the attention heads and half the SSM heads on one input, fused"},
    {.name = "dim_ratio", .type = KeyType::list, .default_value = Json::array({1, 1}), .null = Null::off,
     .range = Range::at_least(1), .elem = KeyType::integer, .list_len = 2,
     .doc = "[a, b], the T-part : M-part split of the heads of `T` and `M`; null: every size given in attn and ssm"},
    {.name = "v_expand", .type = KeyType::integer, .default_value = 2, .range = Range::at_least(1),
     .doc = "Dv = v_expand * head_dim, so the attention half's output keeps its width"},
    {.name = "attn", .type = KeyType::object, .default_value = Json::object(), .table = &kHeadSplitAttnKeys,
     .doc = "the attention half (keys below)"},
    {.name = "ssm", .type = KeyType::object, .default_value = Json::object(), .table = &kHeadSplitSsmKeys,
     .doc = "the Mamba2 half (keys below)"},
    {.name = "norm", .type = KeyType::enumeration, .default_value = "group", .values = {"none", "group"},
     .doc = "\"group\": each head of each half divided by its RMS (no gain)"},
    {.name = "scalar", .type = KeyType::enumeration, .default_value = "none", .values = {"none", "scale", "gate"},
     .doc = "\"scale\": per-channel attn_scale, ssm_scale; \"gate\": sigmoid(gate_logit) and its complement"},
    {.name = "fusion", .type = KeyType::enumeration, .default_value = "diff", .values = {"add", "diff", "conc"},
     .doc = "attention half plus, minus, or concatenated with the Mamba half"},
    {.name = "out_proj", .type = KeyType::integer, .default_value = 2, .range = Range::closed(1, 2),
     .doc = "1: one o_proj after the fusion; 2: each half through its own projection, then the fusion"},
    {.name = "scale_init", .type = KeyType::number, .default_value = 1.0, .range = Range::above(0), .only_for = {"scale"},
     .doc = "initial attn_scale and ssm_scale"},
    {.name = "group_norm_eps", .type = KeyType::number, .default_value = 1e-5, .range = Range::above(0),
     .doc = "eps of the group norm"},
    {.name = "preset", .type = KeyType::enumeration, .null = Null::off, .values = head_split_preset_names(),
     .doc = "a row of intra_hybrid.md 4.4: sets norm, scalar, fusion and out_proj (and scale_init for \"hymba\"), "
            "which must then be absent; written as null"},
}};

namespace {

// Expands a written preset into the keys it stands for (intra_hybrid.md 4.4), before the table fills
// defaults: only then is "written" still visible.
void expand_preset(Json& m) {
  if (!m.is_object() || !m.contains("preset") || m["preset"].is_null()) return;
  const std::string name = normalize_value(*kHeadSplitKeys.find("preset"), m["preset"], "preset").get<std::string>();
  const FusionPreset* p = nullptr;
  for (const FusionPreset& q : kPresets)
    if (name == q.name) p = &q;
  std::vector<const char*> set = {"norm", "scalar", "fusion", "out_proj"};
  if (p->scale_init) set.push_back("scale_init");
  for (const char* k : set)
    if (m.contains(k)) throw ConfigKeyError(k, cannot_be_used_problem(str_cat("preset \"", name, "\" sets ", k)));
  m["norm"] = p->norm;
  m["scalar"] = p->scalar;
  m["fusion"] = p->fusion;
  m["out_proj"] = p->out_proj;
  if (p->scale_init) m["scale_init"] = *p->scale_init;
  m["preset"] = nullptr;
}

// A named block's mixer resolved by its own family: the base of intra_hybrid.md 4.1. Absent when
// model.blocks has no such block or it is of another family; `why` then says so for the message of
// a size that needed it.
struct BaseBlock {
  std::optional<Json> mixer;
  std::string why;

  // The resolved mixer, or the error at `key`, the size that cannot be derived without it.
  const Json& need(const std::string& key) const {
    if (!mixer) throw ConfigKeyError(key, missing_key_problem(str_cat(why, "; give ", key)));
    return *mixer;
  }
  int64_t at(const std::string& need_key, const char* base_key) const { return json_int(need(need_key)[base_key]); }
};

BaseBlock base_block(const LayerConfigContext& ctx, const char* code, const char* type,
                     void (*resolve)(Json&, const LayerConfigContext&)) {
  const std::string path = str_cat("model.blocks.", code, ".mixer");
  const Json* block = ctx.blocks && ctx.blocks->is_object() && ctx.blocks->contains(code) ? &ctx.blocks->at(code) : nullptr;
  const Json* mixer = block && block->is_object() && block->contains("mixer") ? &block->at("mixer") : nullptr;
  if (!mixer) return {std::nullopt, str_cat("no ", path, " to derive it from (intra_hybrid.md 4.1)")};
  if (!mixer->is_object() || !mixer->contains("type") || mixer->at("type") != type)
    return {std::nullopt, str_cat(path, " is not an \"", type, "\" mixer to derive it from")};
  Json m = *mixer;
  try {
    resolve(m, ctx);
  } catch (const ConfigKeyError& e) {
    return {std::nullopt, str_cat(join_path(path, e.path()), ": ", e.problem())};
  }
  return {std::move(m), ""};
}

// q = n / d, or the error at dim_ratio that 4.1 promises for a non-integer quotient.
int64_t exact_quotient(int64_t n, int64_t d, const Json& ratio, const std::string& what) {
  if (n % d != 0)
    throw ConfigKeyError("dim_ratio", expected_problem(str_cat("a ratio [a, b] with ", what, " an integer"), ratio));
  return n / d;
}

// 4.1 and 4.8: null sizes derived from the ratio and the blocks T and M, explicit ones checked
// against them.
void derive_sizes(Json& m, const LayerConfigContext& ctx) {
  const BaseBlock T = base_block(ctx, "T", "attention", resolve_attention_config);
  const BaseBlock M = base_block(ctx, "M", "mamba2", resolve_mamba2_config);
  Json &attn = m["attn"], &ssm = m["ssm"];
  const Json ratio = m["dim_ratio"];
  const int64_t v_expand = json_int(m["v_expand"]);

  // What the ratio gives, where the ratio and the blocks are there: (path, value, where it came from).
  struct Derived {
    std::string path;
    int64_t value;
    std::string from;
  };
  std::vector<Derived> derived;
  if (!ratio.is_null()) {
    const int64_t a = json_int(ratio[0]), b = json_int(ratio[1]);
    const std::string r = str_cat("dim_ratio ", ratio.dump());
    if (T.mixer) {
      const int64_t hq = json_int((*T.mixer)["num_heads"]), group = hq / json_int((*T.mixer)["num_kv_heads"]),
                    d = json_int((*T.mixer)["head_dim"]);
      const int64_t n_T =
          exact_quotient(hq * a, a + b, ratio, str_cat("n_T = num_heads of model.blocks.T (", hq, ") * a / (a + b)"));
      const int64_t n_kvT = exact_quotient(
          n_T, group, ratio, str_cat("n_kvT = n_T (", n_T, ") / the GQA group of model.blocks.T (", group, ")"));
      const std::string from = str_cat(r, " and model.blocks.T");
      derived.push_back({"attn.num_heads", n_T, from});
      derived.push_back({"attn.num_kv_heads", n_kvT, from});
      derived.push_back({"attn.head_dim", d, "head_dim of model.blocks.T"});
      derived.push_back({"attn.v_head_dim", v_expand * d, str_cat("v_expand ", v_expand, " * head_dim of model.blocks.T")});
    }
    if (M.mixer) {
      const int64_t p = json_int((*M.mixer)["headdim"]), h = json_int((*M.mixer)["d_ssm"]) / p;
      const int64_t h_X =
          exact_quotient(h * b, a + b, ratio, str_cat("H_X = the heads of model.blocks.M (", h, ") * b / (a + b)"));
      derived.push_back({"ssm.d_ssm", h_X * p, str_cat(r, " and model.blocks.M")});
      derived.push_back({"ssm.headdim", p, "headdim of model.blocks.M"});
    }
  }
  auto value_at = [&](const std::string& path) -> Json& {
    return path.rfind("attn.", 0) == 0 ? attn[path.substr(5)] : ssm[path.substr(4)];
  };
  for (const Derived& d : derived) {
    Json& v = value_at(d.path);
    if (v.is_null()) v = d.value;
    else if (json_int(v) != d.value)
      throw ConfigKeyError(d.path, expected_problem(str_cat(d.value, " (from ", d.from, "), or dim_ratio null"), v));
  }

  // The sizes 4.1 takes from the blocks without the ratio. n_T and d_ssmX need both, so only a null
  // ratio or a missing block leaves them null here.
  if (attn["head_dim"].is_null()) attn["head_dim"] = T.at("attn.head_dim", "head_dim");
  if (attn["num_heads"].is_null()) {
    if (ratio.is_null()) throw ConfigKeyError("attn.num_heads", missing_key_problem("dim_ratio is null; give attn.num_heads"));
    T.need("attn.num_heads");
  }
  if (attn["num_kv_heads"].is_null()) {
    const int64_t group = T.at("attn.num_kv_heads", "num_heads") / T.at("attn.num_kv_heads", "num_kv_heads");
    if (json_int(attn["num_heads"]) % group != 0)
      throw ConfigKeyError("attn.num_heads", expected_problem(str_cat("a multiple of the GQA group of model.blocks.T (", group,
                                                                      ") when attn.num_kv_heads is null"), attn["num_heads"]));
    attn["num_kv_heads"] = json_int(attn["num_heads"]) / group;
  }
  if (attn["v_head_dim"].is_null()) attn["v_head_dim"] = v_expand * json_int(attn["head_dim"]);
  if (ssm["headdim"].is_null()) ssm["headdim"] = M.at("ssm.headdim", "headdim");
  if (ssm["d_ssm"].is_null()) {
    if (ratio.is_null()) throw ConfigKeyError("ssm.d_ssm", missing_key_problem("dim_ratio is null; give ssm.d_ssm"));
    M.need("ssm.d_ssm");
  }
  for (const char* k : {"d_state", "ngroups", "d_conv"})
    if (ssm[k].is_null()) ssm[k] = M.at(str_cat("ssm.", k), k);
}

// Each half as a mixer of its own family, through that family's rules; errors land on the key of
// the half (attention's num_kv_heads is attn.num_kv_heads here).
void check_halves(const Json& m, const LayerConfigContext& ctx) {
  const Json& attn = m["attn"];
  Json half{{"type", "attention"}};
  for (const char* k : {"num_heads", "num_kv_heads", "head_dim", "v_head_dim", "rope_theta"}) half[k] = attn[k];
  try {
    resolve_attention_config(half, ctx);
  } catch (const ConfigKeyError& e) {
    throw e.prefixed("attn");
  }
  Json ssm{{"type", "mamba2"}};
  for (const auto& [k, v] : m["ssm"].items()) ssm[k] = v;
  try {
    resolve_mamba2_config(ssm, ctx);
  } catch (const ConfigKeyError& e) {
    throw e.prefixed("ssm");
  }
}

// The fusion rules of intra_hybrid.md 4.4 and 4.8.
void check_fusion(const Json& m) {
  const int64_t D_T = json_int(m["attn"]["num_heads"]) * json_int(m["attn"]["v_head_dim"]), D_M = json_int(m["ssm"]["d_ssm"]);
  const std::string widths = str_cat("D_T = num_heads * v_head_dim = ", D_T, ", D_M = d_ssm = ", D_M);
  const int64_t out = json_int(m["out_proj"]);
  if (m["fusion"] == "conc" && out == 2)
    throw ConfigKeyError("fusion", expected_problem("\"add\" or \"diff\" with out_proj 2 (two projections of a concatenation "
                                                    "are one; conc takes out_proj 1)", m["fusion"]));
  if (m["scalar"] == "gate" && out == 2)
    throw ConfigKeyError("scalar", expected_problem("\"none\" or \"scale\" with out_proj 2 (the gate is defined for one "
                                                    "projection of the fused vector)", m["scalar"]));
  if (m["scalar"] == "gate" && m["fusion"] == "conc")
    throw ConfigKeyError("scalar", expected_problem("\"none\" or \"scale\" with fusion \"conc\" (the gate is defined for "
                                                    "add and diff, intra_hybrid.md 4.6)", m["scalar"]));
  if (m["scalar"] == "gate" && D_T != D_M)
    throw ConfigKeyError(
        "scalar", expected_problem(str_cat("\"none\" or \"scale\" when the halves differ in width (", widths, ")"), m["scalar"]));
  if (m["fusion"] != "conc" && out == 1 && D_T != D_M)
    throw ConfigKeyError(
        "fusion", expected_problem(str_cat("\"conc\", or out_proj 2, when the halves differ in width (", widths, ")"), m["fusion"]));
}

}  // namespace

void resolve_head_split_config(Json& mixer, const LayerConfigContext& ctx) {
  Json written = mixer;
  expand_preset(written);
  Json m = apply_key_table(kHeadSplitKeys, written, "");
  derive_sizes(m, ctx);
  check_halves(m, ctx);
  check_fusion(m);
  mixer = std::move(m);
}

}  // namespace hyb
