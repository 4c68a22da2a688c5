// The head_split config (intra_hybrid.md 4.8): the sizes of 4.1 derived from the blocks T and M for
// every base of Table 6, the presets of 4.4, a resolved object resolving to itself without the
// blocks, every validation error of 4.1 and 4.8 (at the mixer and in the form of config.md 8.2), and
// the 1B models of 2.1 and 4.10 with their non-embedding counts.
#include <catch2/catch.hpp>

#include "layers/head_split/head_split_cases.h"
#include "layers/head_split/head_split_config.h"
#include "layers/mixer_test_util.h"
#include "train/config_test_util.h"
#include "train/model_from_config.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

std::string error_of(const json& written, const json& blocks = head_split_small_blocks()) {
  return config_error([&] { head_split_resolved(written, blocks); });
}

}  // namespace

TEST_CASE("head_split derives the sizes of intra_hybrid.md 4.1 for every base of Table 6: D_T = D_M = d_model, Dv = P",
          "[head_split][config]") {
  struct Row {
    const char* size;
    int64_t d, hq, hkv, D, d_ssm, P, N;
    int64_t n_T, n_kvT, Dv, H_X;
  };
  const Row rows[] = {
      {"100M", 1024, 16, 4, 64, 2048, 128, 128, 8, 2, 128, 8},
      {"350M", 1536, 24, 8, 64, 3072, 128, 128, 12, 4, 128, 12},
      {"1B", 2048, 32, 8, 64, 4096, 128, 128, 16, 4, 128, 16},
      {"3B", 3072, 32, 8, 96, 6144, 192, 256, 16, 4, 192, 16},
  };
  for (const Row& r : rows) {
    DYNAMIC_SECTION(r.size) {
      const json blocks = head_split_blocks(
          {{"type", "attention"}, {"num_heads", r.hq}, {"num_kv_heads", r.hkv}, {"head_dim", r.D}, {"rope_theta", 500000.0}},
          {{"type", "mamba2"}, {"d_ssm", r.d_ssm}, {"headdim", r.P}, {"d_state", r.N}, {"ngroups", 1}, {"d_conv", 4}});
      const json m = head_split_resolved({{"dim_ratio", {1, 1}}, {"preset", "group_diff2"}}, blocks, r.d);
      const json& a = m["attn"];
      const json& s = m["ssm"];
      REQUIRE(a["num_heads"] == r.n_T);
      REQUIRE(a["num_kv_heads"] == r.n_kvT);
      REQUIRE(a["head_dim"] == r.D);
      REQUIRE(a["v_head_dim"] == r.Dv);
      REQUIRE(s["headdim"] == r.P);
      REQUIRE(s["d_ssm"] == r.H_X * r.P);
      REQUIRE(s["d_state"] == r.N);
      REQUIRE(s["ngroups"] == 1);
      REQUIRE(s["d_conv"] == 4);
      REQUIRE(r.n_T * r.Dv == r.d);     // D_T
      REQUIRE(r.H_X * r.P == r.d);      // D_M
      REQUIRE(r.Dv == r.P);
    }
  }
}

TEST_CASE("head_split resolves to every key of 4.8 with its defaults, group_diff2's settings, and to itself without the blocks",
          "[head_split][config]") {
  const json m = head_split_resolved(json::object());
  const json want = json::parse(R"({"type": "head_split", "dim_ratio": [1, 1], "v_expand": 2,
      "attn": {"num_heads": 2, "num_kv_heads": 1, "head_dim": 4, "v_head_dim": 8, "rope_theta": 500000.0},
      "ssm": {"d_ssm": 16, "headdim": 8, "d_state": 4, "ngroups": 1, "d_conv": 4, "chunk_size": 256},
      "norm": "group", "scalar": "none", "fusion": "diff", "out_proj": 2, "group_norm_eps": 1e-05, "preset": null})");
  REQUIRE(m == want);
  REQUIRE(resolve_test_mixer("head_split", m, {.d_model = 16}) == m);
  REQUIRE(head_split_resolved({{"preset", "group_diff2"}}) == m);
}

TEST_CASE("each head_split preset sets the row of intra_hybrid.md 4.4 and is then written as null", "[head_split][config]") {
  struct Row {
    const char* preset;
    const char *norm, *scalar, *fusion;
    int64_t out_proj;
    double scale_init;  // 0: the key does not apply
  };
  const Row rows[] = {
      {"hymba", "group", "scale", "add", 1, 0.5},        {"nonorm_scale_add1", "none", "scale", "add", 1, 1.0},
      {"group_add1", "group", "none", "add", 1, 0},      {"group_gate_add1", "group", "gate", "add", 1, 0},
      {"group_diff1", "group", "none", "diff", 1, 0},    {"group_conc1", "group", "none", "conc", 1, 0},
      {"group_add2", "group", "none", "add", 2, 0},      {"group_diff2", "group", "none", "diff", 2, 0},
  };
  REQUIRE(head_split_preset_names().size() == std::size(rows));
  for (const Row& r : rows) {
    DYNAMIC_SECTION(r.preset) {
      const json m = head_split_resolved({{"preset", r.preset}});
      REQUIRE(m["norm"] == r.norm);
      REQUIRE(m["scalar"] == r.scalar);
      REQUIRE(m["fusion"] == r.fusion);
      REQUIRE(m["out_proj"] == r.out_proj);
      REQUIRE(m["preset"].is_null());
      if (r.scale_init > 0) REQUIRE(m["scale_init"] == r.scale_init);
      else REQUIRE_FALSE(m.contains("scale_init"));
      json explicit_keys = {{"norm", r.norm}, {"scalar", r.scalar}, {"fusion", r.fusion}, {"out_proj", r.out_proj}};
      if (r.scale_init > 0) explicit_keys["scale_init"] = r.scale_init;
      REQUIRE(head_split_resolved(explicit_keys) == m);
    }
  }
  // nonorm_scale_add1 leaves scale_init to the config.
  REQUIRE(head_split_resolved({{"preset", "nonorm_scale_add1"}, {"scale_init", 2.0}})["scale_init"] == 2.0);
}

TEST_CASE("head_split takes explicit sizes that agree with dim_ratio, any sizes with dim_ratio null, and ratios other than 1:1",
          "[head_split][config]") {
  REQUIRE(head_split_resolved({{"attn", {{"num_heads", 2}, {"head_dim", 4}}}, {"ssm", {{"d_ssm", 16}}}}) ==
          head_split_resolved(json::object()));
  const json free = head_split_resolved({{"dim_ratio", nullptr}, {"attn", {{"num_heads", 3}, {"num_kv_heads", 1}}},
                              {"ssm", {{"d_ssm", 24}}}, {"fusion", "conc"}, {"out_proj", 1}});
  REQUIRE(free["attn"]["num_heads"] == 3);
  REQUIRE(free["attn"]["v_head_dim"] == 8);
  REQUIRE(free["ssm"]["d_ssm"] == 24);
  // 3:1 of 4 heads in groups of 1 and 4 SSM heads: n_T 3, H_X 1; D_T 24 against D_M 8, so diff with two projections.
  const json t1 = head_split_ungrouped_blocks();
  const json r31 = head_split_resolved({{"dim_ratio", {3, 1}}}, t1);
  REQUIRE(r31["attn"]["num_heads"] == 3);
  REQUIRE(r31["attn"]["num_kv_heads"] == 3);
  REQUIRE(r31["ssm"]["d_ssm"] == 8);
  REQUIRE(head_split_resolved({{"dim_ratio", {1, 3}}, {"fusion", "conc"}, {"out_proj", 1}}, t1)["ssm"]["d_ssm"] == 24);
}

TEST_CASE("every head_split config error names the key, the value and what was expected", "[head_split][config][errors]") {
  // Presets (4.4, 4.8).
  REQUIRE(error_of({{"preset", "group_diff2"}, {"norm", "none"}}) ==
          "norm: cannot be used here: preset \"group_diff2\" sets norm");
  REQUIRE(error_of({{"preset", "group_add1"}, {"out_proj", 1}}) ==
          "out_proj: cannot be used here: preset \"group_add1\" sets out_proj");
  REQUIRE(error_of({{"preset", "hymba"}, {"scale_init", 0.5}}) ==
          "scale_init: cannot be used here: preset \"hymba\" sets scale_init");
  REQUIRE(error_of({{"preset", "best"}}) ==
          "preset: expected one of \"hymba\", \"nonorm_scale_add1\", \"group_add1\", \"group_gate_add1\", \"group_diff1\", "
          "\"group_conc1\", \"group_add2\", \"group_diff2\" or null, got \"best\"");
  REQUIRE(error_of({{"scale_init", 0.5}}) == "scale_init: cannot be used here: head_split scalar is \"none\"");
  // Non-integer quotients of 4.1.
  REQUIRE(error_of({{"dim_ratio", {1, 2}}}) ==
          "dim_ratio: expected a ratio [a, b] with n_T = num_heads of model.blocks.T (4) * a / (a + b) an integer, got [1,2]");
  REQUIRE(error_of({{"dim_ratio", {3, 1}}}) ==
          "dim_ratio: expected a ratio [a, b] with n_kvT = n_T (3) / the GQA group of model.blocks.T (2) an integer, "
          "got [3,1]");
  const json six_heads = head_split_blocks({{"type", "attention"}, {"num_heads", 6}, {"num_kv_heads", 6}, {"head_dim", 4}},
                                     {{"type", "mamba2"}, {"d_ssm", 32}, {"headdim", 8}, {"d_state", 4}});
  REQUIRE(error_of({{"dim_ratio", {1, 2}}}, six_heads) ==
          "dim_ratio: expected a ratio [a, b] with H_X = the heads of model.blocks.M (4) * b / (a + b) an integer, got [1,2]");
  REQUIRE(error_of({{"dim_ratio", {0, 1}}}) == "dim_ratio[0]: expected an integer >= 1, got 0");
  REQUIRE(error_of({{"dim_ratio", {1}}}) == "dim_ratio: expected a list of 2 integers >= 1 or null, got [1]");
  // Explicit sizes against dim_ratio (4.8).
  REQUIRE(error_of({{"attn", {{"num_heads", 4}}}}) ==
          "attn.num_heads: expected 2 (from dim_ratio [1,1] and model.blocks.T), or dim_ratio null, got 4");
  REQUIRE(error_of({{"attn", {{"num_kv_heads", 2}}}}) ==
          "attn.num_kv_heads: expected 1 (from dim_ratio [1,1] and model.blocks.T), or dim_ratio null, got 2");
  REQUIRE(error_of({{"attn", {{"head_dim", 8}}}}) ==
          "attn.head_dim: expected 4 (from head_dim of model.blocks.T), or dim_ratio null, got 8");
  REQUIRE(error_of({{"attn", {{"v_head_dim", 4}}}}) ==
          "attn.v_head_dim: expected 8 (from v_expand 2 * head_dim of model.blocks.T), or dim_ratio null, got 4");
  REQUIRE(error_of({{"ssm", {{"d_ssm", 24}}}}) ==
          "ssm.d_ssm: expected 16 (from dim_ratio [1,1] and model.blocks.M), or dim_ratio null, got 24");
  REQUIRE(error_of({{"ssm", {{"headdim", 4}}}}) ==
          "ssm.headdim: expected 8 (from headdim of model.blocks.M), or dim_ratio null, got 4");
  // Sizes that cannot be derived (config.md 3.3).
  REQUIRE(error_of({{"dim_ratio", nullptr}}) ==
          "attn.num_heads: missing required key (dim_ratio is null; give attn.num_heads)");
  REQUIRE(error_of({{"dim_ratio", nullptr}, {"attn", {{"num_heads", 2}}}}) ==
          "ssm.d_ssm: missing required key (dim_ratio is null; give ssm.d_ssm)");
  const json no_t = {{"M", head_split_small_blocks()["M"]}};
  REQUIRE(error_of(json::object(), no_t) ==
          "attn.head_dim: missing required key (no model.blocks.T.mixer to derive it from (intra_hybrid.md 4.1); give "
          "attn.head_dim)");
  REQUIRE(error_of(json::object(), nullptr) == error_of(json::object(), no_t));
  REQUIRE(error_of({{"attn", {{"num_heads", 2}, {"num_kv_heads", 1}, {"head_dim", 4}}}}, no_t) == "");
  REQUIRE(error_of({{"attn", {{"num_heads", 2}, {"head_dim", 4}}}}, no_t) ==
          "attn.num_kv_heads: missing required key (no model.blocks.T.mixer to derive it from (intra_hybrid.md 4.1); give "
          "attn.num_kv_heads)");
  const json t_is_mamba = {{"T", head_split_small_blocks()["M"]}, {"M", head_split_small_blocks()["M"]}};
  REQUIRE(error_of(json::object(), t_is_mamba) ==
          "attn.head_dim: missing required key (model.blocks.T.mixer is not an \"attention\" mixer to derive it from; give "
          "attn.head_dim)");
  const json t_broken = {{"T", {{"mixer", {{"type", "attention"}}}}}, {"M", head_split_small_blocks()["M"]}};
  REQUIRE(error_of(json::object(), t_broken) ==
          "attn.head_dim: missing required key (model.blocks.T.mixer.num_heads: missing required key; give attn.head_dim)");
  const json no_m = {{"T", head_split_small_blocks()["T"]}};
  REQUIRE(error_of(json::object(), no_m) ==
          "ssm.headdim: missing required key (no model.blocks.M.mixer to derive it from (intra_hybrid.md 4.1); give "
          "ssm.headdim)");
  REQUIRE(error_of({{"dim_ratio", nullptr}, {"attn", {{"num_heads", 3}}}, {"ssm", {{"d_ssm", 16}}}}) ==
          "attn.num_heads: expected a multiple of the GQA group of model.blocks.T (2) when attn.num_kv_heads is null, got 3");
  // The halves under their own families' rules.
  REQUIRE(error_of({{"dim_ratio", nullptr}, {"attn", {{"num_heads", 3}, {"num_kv_heads", 2}}}, {"ssm", {{"d_ssm", 16}}}}) ==
          "attn.num_kv_heads: expected a divisor of num_heads (3), got 2");
  REQUIRE(error_of({{"v_expand", 80}}) == "attn.v_head_dim: expected an even integer <= 256, got 320");
  REQUIRE(error_of({{"ssm", {{"ngroups", 3}}}}) ==
          "ssm.ngroups: expected a divisor of the head count d_ssm / headdim (2), got 3");
  REQUIRE(error_of({{"ssm", {{"chunk_size", 32}}}}) == "ssm.chunk_size: expected 64, 128 or 256, got 32");
  REQUIRE(error_of({{"dim_ratio", nullptr}, {"attn", {{"num_heads", 2}}}, {"ssm", {{"d_ssm", 12}}}}) ==
          "ssm.d_ssm: expected a multiple of headdim (8), got 12");
  REQUIRE(error_of({{"attn", {{"window", 8}}}}) == "attn.window: unknown key");
  // The fusion rules (4.4, 4.6, 4.8).
  REQUIRE(error_of({{"fusion", "conc"}}) ==
          "fusion: expected \"add\" or \"diff\" with out_proj 2 (two projections of a concatenation are one; conc takes "
          "out_proj 1), got \"conc\"");
  REQUIRE(error_of({{"scalar", "gate"}}) ==
          "scalar: expected \"none\" or \"scale\" with out_proj 2 (the gate is defined for one projection of the fused "
          "vector), got \"gate\"");
  REQUIRE(error_of({{"scalar", "gate"}, {"fusion", "conc"}, {"out_proj", 1}}) ==
          "scalar: expected \"none\" or \"scale\" with fusion \"conc\" (the gate is defined for add and diff, intra_hybrid.md "
          "4.6), got \"gate\"");
  const json wide_t = head_split_ungrouped_blocks();
  REQUIRE(error_of({{"dim_ratio", {3, 1}}, {"scalar", "gate"}, {"fusion", "add"}, {"out_proj", 1}}, wide_t) ==
          "scalar: expected \"none\" or \"scale\" when the halves differ in width (D_T = num_heads * v_head_dim = 24, D_M = "
          "d_ssm = 8), got \"gate\"");
  REQUIRE(error_of({{"dim_ratio", {3, 1}}, {"fusion", "add"}, {"out_proj", 1}}, wide_t) ==
          "fusion: expected \"conc\", or out_proj 2, when the halves differ in width (D_T = num_heads * v_head_dim = 24, D_M = "
          "d_ssm = 8), got \"add\"");
  REQUIRE(error_of({{"dim_ratio", {3, 1}}, {"preset", "group_diff1"}}, wide_t) ==
          "fusion: expected \"conc\", or out_proj 2, when the halves differ in width (D_T = num_heads * v_head_dim = 24, D_M = "
          "d_ssm = 8), got \"diff\"");
  REQUIRE(error_of({{"out_proj", 3}}) == "out_proj: expected an integer in [1, 2], got 3");
  REQUIRE(error_of({{"norm", "layer"}}) == "norm: expected one of \"none\", \"group\", got \"layer\"");
}

TEST_CASE("a head_split error in a layout config reads SOURCE: PATH: PROBLEM with the layers it reached",
          "[head_split][config][errors]") {
  auto config = [](const std::string& x, const std::string& blocks_extra = "") {
    return R"({"model": {"d_model": 16, "blocks": {)" + blocks_extra +
           R"("M": {"mixer": {"type": "mamba2", "d_ssm": 32, "headdim": 8, "d_state": 4}},
               "X": {"mixer": )" + x + R"(}}, "layout": {"pattern": "MXMX"}},
        "data": {"train": "t.bin", "seq_len": 16}, "train": {"batch_size": 2, "steps": 2, "optimizer": {"lr": 0.001}}})";
  };
  const std::string t = R"("T": {"mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 4}}, )";
  using config_test::error_no_files;
  REQUIRE(error_no_files(config(R"({"type": "head_split", "fusion": "conc"})", t)) ==
          "configs/x.json: model.blocks.X.mixer.fusion: expected \"add\" or \"diff\" with out_proj 2 (two projections of a "
          "concatenation are one; conc takes out_proj 1), got \"conc\" (in model.layers[1,3])");
  REQUIRE(error_no_files(config(R"({"type": "head_split"})")) ==
          "configs/x.json: model.blocks.X.mixer.attn.head_dim: missing required key (no model.blocks.T.mixer to derive it "
          "from (intra_hybrid.md 4.1); give attn.head_dim) (in model.layers[1,3])");
  REQUIRE(error_no_files(config(R"({"type": "head_split", "dim_ratio": [1, 2]})", t)) ==
          "configs/x.json: model.blocks.X.mixer.dim_ratio: expected a ratio [a, b] with n_T = num_heads of model.blocks.T "
          "(4) * a / (a + b) an integer, got [1,2] (in model.layers[1,3])");
  REQUIRE(error_no_files(config(R"({"type": "head_split", "preset": "group_add2"})", t),
                         {"model.layers[3].mixer.fusion=\"conc\""}) ==
          "--set: model.layers[3].mixer.fusion: cannot be used here: preset \"group_add2\" sets fusion");
}

TEST_CASE("the Intra-H model of intra_hybrid.md 2.1 resolves to MMMXMMMMMXMMM with 0.9800B non-embedding parameters, "
          "the all-X model of Table 5 to 0.9990B (0.9402B with one output projection)",
          "[head_split][config]") {
  auto model = [](const std::string& x, const std::string& layout) {
    return R"({"model": {"vocab_size": 128256, "d_model": 2048, "max_seq_len": 8192, "norm_eps": 1e-5,
        "tie_embeddings": true, "init": "gpt2", "init_std": 0.02,
        "block": {"mlp": {"type": "swiglu", "intermediate_size": 8192}},
        "blocks": {
          "T": {"mixer": {"type": "attention", "num_heads": 32, "num_kv_heads": 8, "head_dim": 64, "rope_theta": 500000.0}},
          "M": {"mixer": {"type": "mamba2", "d_ssm": 4096, "headdim": 128, "d_state": 128, "ngroups": 1, "d_conv": 4}},
          "X": {"mixer": )" + x + R"(}},
        "layout": )" + layout + R"(},
      "data": {"train": "t.bin", "seq_len": 8192}, "train": {"batch_size": 256, "steps": 10, "optimizer": {"lr": 6e-4}}})";
  };
  const std::string x = R"({"type": "head_split", "dim_ratio": [1, 1], "preset": "group_diff2"})";
  const RunConfig intra = config_test::resolve_no_files(model(x, R"({"generate": {"n_layers": 13, "base": "M",
      "special": "X", "n_special": 2, "placement": "middle"}})"));
  std::string codes;
  for (const std::string& c : intra.layout_codes) codes += c;
  REQUIRE(codes == "MMMXMMMMMXMMM");
  REQUIRE(parameter_counts(intra).non_embedding == 980000128);
  REQUIRE(parameter_counts(config_test::resolve_no_files(model(x, R"({"pattern": "XXXXXXXXXXXXXX"})"))).non_embedding ==
          998953120);
  const std::string one = R"({"type": "head_split", "preset": "group_diff1"})";
  REQUIRE(parameter_counts(config_test::resolve_no_files(model(one, R"({"pattern": "XXXXXXXXXXXXXX"})"))).non_embedding ==
          940232864);
}
