// The head_split mixer on the CPU: the parameter names and count of intra_hybrid.md 4.7 (the 1B
// numbers included), the initialization of 1.3 and 4.4, the equivalences of 4.5 to machine precision,
// the group norm and gate invariants of section 10, finite differences for every fusion variant and
// every preset of the mixer (10.6), and decoding (4.9) at the mixer and the model level.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "autograd/gradcheck.h"
#include "autograd/ops/unary.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/head_split/head_split.h"
#include "layers/head_split/head_split_config.h"
#include "layers/head_split/head_split_cases.h"
#include "layers/mixer_test_util.h"
#include "layers/model/causal_lm.h"
#include "optim/adamw.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

std::unique_ptr<HeadSplitMixer> build(const json& mixer, int64_t d_model = 16, int64_t num_layers = 1) {
  return std::make_unique<HeadSplitMixer>(head_split_config_from_json(mixer),
                                          test_mixer_context({.d_model = d_model, .num_layers = num_layers}));
}

std::map<std::string, Var> parameters(const Module& m) {
  std::map<std::string, Var> out;
  for (const auto& p : m.named_parameters()) out[p.name] = p.var;
  return out;
}

Tensor negated(const Tensor& t) {
  NoGradGuard no_grad;
  return mul_scalar(Var(t), -1.0).data();
}

// Output and every gradient of the mixer on x with upstream gradient dy, by name ("y", "dx", "d <param>").
std::map<std::string, Tensor> run(HeadSplitMixer& layer, const Tensor& x, const Tensor& dy) {
  for (const auto& p : layer.named_parameters()) p.var.zero_grad();
  Var xv(x, true);
  Var y = layer.forward(xv);
  backward({y}, {dy});
  std::map<std::string, Tensor> out{{"y", y.data()}, {"dx", xv.grad()}};
  for (const auto& p : layer.named_parameters()) out["d " + p.name] = p.var.grad();
  return out;
}

}  // namespace

TEST_CASE("head_split has the parameter names and shapes of intra_hybrid.md 4.7 in every fusion layout", "[head_split][cpu]") {
  struct Row {
    const char* preset;
    std::vector<std::pair<std::string, Shape>> extra;  // beyond the halves' input-side parameters
  };
  const int64_t d = 16;
  const std::vector<Row> rows = {
      {"group_diff2", {{"attn.o_proj.weight", {d, 16}}, {"ssm.out_proj.weight", {d, 16}}}},
      {"group_add1", {{"o_proj.weight", {d, 16}}}},
      {"group_conc1", {{"o_proj.weight", {d, 32}}}},
      {"hymba", {{"attn_scale", {16}}, {"ssm_scale", {16}}, {"o_proj.weight", {d, 16}}}},
      {"group_gate_add1", {{"gate_logit", {16}}, {"o_proj.weight", {d, 16}}}},
  };
  for (const Row& r : rows) {
    DYNAMIC_SECTION(r.preset) {
      auto layer = build(head_split_resolved({{"preset", r.preset}}));
      std::map<std::string, Shape> want = {{"attn.q_proj.weight", {8, d}}, {"attn.k_proj.weight", {4, d}},
                                           {"attn.v_proj.weight", {8, d}}, {"ssm.conv1d.weight", {24, 1, 4}},
                                           {"ssm.conv1d.bias", {24}},      {"ssm.dt_bias", {2}},
                                           {"ssm.A_log", {2}},             {"ssm.D", {2}},
                                           {"ssm.norm.weight", {16}},      {"ssm.in_proj.weight", {2 * 16 + 2 * 4 + 2, d}}};
      for (const auto& [name, shape] : r.extra) want[name] = shape;
      std::map<std::string, Shape> got;
      for (const auto& p : layer->named_parameters()) {
        got[p.name] = p.var.shape();
        // 1.3: no weight decay on the fusion's scales and gate (nor Mamba's A_log, D, dt_bias, norm).
        if (p.name == "attn_scale" || p.name == "ssm_scale" || p.name == "gate_logit") REQUIRE_FALSE(p.decay);
      }
      REQUIRE(got == want);
    }
  }
}

TEST_CASE("head_split at 1B (1, 1) has the counts of 4.7: mixer 21,017,904, block 71,353,648 with two outputs and "
          "67,159,344 with one",
          "[head_split][cpu]") {
  // intra_hybrid.md 1.2's 1B base: d 2048, d_ffn 8192, Hq 32, Hkv 8, D 64; d_ssm 4096, P 128, N 128, W 4.
  const json blocks = head_split_blocks(
      {{"type", "attention"}, {"num_heads", 32}, {"num_kv_heads", 8}, {"head_dim", 64}, {"rope_theta", 500000.0}},
      {{"type", "mamba2"}, {"d_ssm", 4096}, {"headdim", 128}, {"d_state", 128}, {"ngroups", 1}, {"d_conv", 4}});
  const int64_t d = 2048, n_T = 16, n_kvT = 4, Dqk = 64, Dv = 128, H_X = 16, d_ssmX = 2048, G = 1, N = 128, W = 4;
  const int64_t D_T = n_T * Dv, D_M = d_ssmX;
  const int64_t halves = d * (n_T * Dqk + n_kvT * Dqk + n_kvT * Dv) + d * (2 * d_ssmX + 2 * G * N + H_X) +
                         (d_ssmX + 2 * G * N) * (W + 1) + 3 * H_X + d_ssmX;
  auto block_params = [&](const char* preset) {
    LmConfig cfg;
    cfg.vocab_size = cfg.real_vocab = 16;
    cfg.d_model = d;
    cfg.max_seq_len = 8192;
    cfg.init = "gpt2";
    cfg.layers = {{head_split_resolved({{"preset", preset}}, blocks, d, 13), "swiglu", 8192}};
    return CausalLM(cfg).backbone().blocks()[0]->num_parameters();
  };
  REQUIRE(build(head_split_resolved({{"preset", "group_diff2"}}, blocks, d), d)->num_parameters() == halves + d * (D_T + D_M));
  REQUIRE(halves + d * (D_T + D_M) == 21017904);
  REQUIRE(build(head_split_resolved({{"preset", "group_conc1"}}, blocks, d), d)->num_parameters() == 21017904);
  REQUIRE(build(head_split_resolved({{"preset", "group_add1"}}, blocks, d), d)->num_parameters() == halves + d * D_T);
  REQUIRE(build(head_split_resolved({{"preset", "hymba"}}, blocks, d), d)->num_parameters() == halves + d * D_T + D_T + D_M);
  REQUIRE(build(head_split_resolved({{"preset", "group_gate_add1"}}, blocks, d), d)->num_parameters() ==
          halves + d * D_T + D_T);
  REQUIRE(block_params("group_diff2") == 71353648);
  REQUIRE(block_params("group_add2") == 71353648);
  REQUIRE(block_params("group_diff1") == 67159344);
}

TEST_CASE("head_split initializes by intra_hybrid.md 1.3 under both init settings: projections N(0, 0.02), outputs "
          "N(0, 0.02 / sqrt(2 L)), scales scale_init, gate 0",
          "[head_split][cpu]") {
  // d 64: n_T 4 of Dqk 8, Dv 16; H_X 4 of P 16.
  const json blocks = head_split_blocks({{"type", "attention"}, {"num_heads", 8}, {"num_kv_heads", 4}, {"head_dim", 8}},
                                  {{"type", "mamba2"}, {"d_ssm", 128}, {"headdim", 16}, {"d_state", 8}});
  const int64_t d = 64, L = 6;
  for (const char* init : {"family", "gpt2"}) {
    for (const char* preset : {"group_diff2", "group_conc1", "hymba", "group_gate_add1"}) {
      DYNAMIC_SECTION(init << " " << preset) {
        HeadSplitMixer layer(head_split_config_from_json(head_split_resolved({{"preset", preset}}, blocks, d, L)),
                             test_mixer_context({.d_model = d, .num_layers = L}, init));
        layer.initialize(3);
        for (const auto& p : layer.named_parameters()) {
          const std::vector<double> v = p.var.data().to_double_vector();
          if (p.name.ends_with("proj.weight")) {
            double ss = 0;
            for (double x : v) ss += x * x;
            const bool output = p.name == "o_proj.weight" || p.name == "attn.o_proj.weight" || p.name == "ssm.out_proj.weight";
            const double want = output ? 0.02 / std::sqrt(2.0 * L) : 0.02;
            INFO(p.name);
            // The sample rms of n normals has relative spread 1/sqrt(2n).
            REQUIRE(std::sqrt(ss / double(v.size())) == Approx(want).epsilon(5.0 / std::sqrt(2.0 * double(v.size()))));
          }
          if (p.name == "attn_scale" || p.name == "ssm_scale")
            for (double x : v) REQUIRE(x == 0.5);
          if (p.name == "gate_logit")
            for (double x : v) REQUIRE(x == 0.0);
        }
      }
    }
  }
}

TEST_CASE("conc with one output equals add with two when W_o = [W_oT | W_oM]: outputs and every gradient (4.5 item 1)",
          "[head_split][cpu][grad]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  auto add2 = build(head_split_resolved({{"preset", "group_add2"}}));
  auto conc1 = build(head_split_resolved({{"preset", "group_conc1"}}));
  add2->initialize(1);
  randomize_parameters(*add2, 2);
  auto a = parameters(*add2), c = parameters(*conc1);
  for (auto& [name, v] : c)
    if (name != "o_proj.weight") v.data().copy_(a.at(name).data());
  c.at("o_proj.weight").data().narrow(1, 0, 16).copy_(a.at("attn.o_proj.weight").data());
  c.at("o_proj.weight").data().narrow(1, 16, 16).copy_(a.at("ssm.out_proj.weight").data());
  const Tensor x = random_tensor({2, 9, 16}, 3), dy = random_tensor({2, 9, 16}, 4);
  auto ra = run(*add2, x, dy), rc = run(*conc1, x, dy);
  for (const auto& [name, t] : rc) {
    INFO(name);
    if (name == "d o_proj.weight") {
      REQUIRE(rel_error(t.narrow(1, 0, 16).contiguous(), ra.at("d attn.o_proj.weight")) < 1e-12);
      REQUIRE(rel_error(t.narrow(1, 16, 16).contiguous(), ra.at("d ssm.out_proj.weight")) < 1e-12);
    } else {
      REQUIRE(rel_error(t, ra.at(name)) < 1e-12);
    }
  }
}

TEST_CASE("diff with two outputs equals add with two and W_oM negated, and one AdamW step keeps the correspondence "
          "(4.5 item 2)",
          "[head_split][cpu][grad]") {
  auto add2 = build(head_split_resolved({{"preset", "group_add2"}}));
  auto diff2 = build(head_split_resolved({{"preset", "group_diff2"}}));
  diff2->initialize(1);
  randomize_parameters(*diff2, 2, 0.3);
  auto a = parameters(*add2), df = parameters(*diff2);
  for (auto& [name, v] : a) v.data().copy_(name == "ssm.out_proj.weight" ? negated(df.at(name).data()) : df.at(name).data());
  const Tensor x = random_tensor({2, 9, 16}, 3, DType::f32), dy = random_tensor({2, 9, 16}, 4, DType::f32);
  auto ra = run(*add2, x, dy), rd = run(*diff2, x, dy);
  for (const auto& [name, t] : rd) {
    INFO(name);
    REQUIRE(rel_error(name == "d ssm.out_proj.weight" ? negated(t) : t, ra.at(name)) == 0.0);
  }
  auto optimizer = [](const Module& m) {
    std::vector<OptimParam> ps;
    for (const auto& p : m.named_parameters()) ps.push_back({p.name, p.var, 0.1, 1.0});
    return AdamW(ps, {.lr = 1e-2});
  };
  AdamW oa = optimizer(*add2), od = optimizer(*diff2);
  oa.step(1.0);
  od.step(1.0);
  for (const auto& [name, v] : df) {
    INFO(name);
    const Tensor w = name == "ssm.out_proj.weight" ? negated(v.data()) : v.data();
    REQUIRE(rel_error(w, a.at(name).data()) == 0.0);
  }
  REQUIRE(rel_error(df.at("ssm.out_proj.weight").data(), a.at("ssm.out_proj.weight").data()) > 1.0);
}

TEST_CASE("the group norm gives every head RMS 1 and ignores a positive scale of any head's input (section 10.4)",
          "[head_split][cpu]") {
  const int64_t Dh = 5, H = 3;
  const Tensor x = random_tensor({2, 4, H * Dh}, 1);
  const double eps = 1e-5;
  const Tensor n = group_rms_norm(Var(x), Dh, eps).data();
  const std::vector<double> xv = x.to_double_vector(), nv = n.to_double_vector();
  for (size_t row = 0; row < xv.size() / Dh; ++row) {
    double sx = 0, sn = 0;
    for (int64_t j = 0; j < Dh; ++j) {
      sx += xv[row * Dh + j] * xv[row * Dh + j];
      sn += nv[row * Dh + j] * nv[row * Dh + j];
    }
    REQUIRE(std::sqrt(sn / Dh) == Approx(std::sqrt(sx / Dh / (sx / Dh + eps))).epsilon(1e-12));
  }
  // Head 1 of every token scaled by 7: the outputs at eps 0 are unchanged.
  std::vector<double> scaled = xv;
  for (size_t row = 0; row < xv.size() / (H * Dh); ++row)
    for (int64_t j = 0; j < Dh; ++j) scaled[row * H * Dh + Dh + j] *= 7.0;
  const Tensor xs = Tensor::from_vector(scaled, x.shape());
  REQUIRE(rel_error(group_rms_norm(Var(xs), Dh, 0.0).data(), group_rms_norm(Var(x), Dh, 0.0).data()) < 1e-14);
}

TEST_CASE("with gate_logit 0 the gated add with one output is half the plain add (section 10.5)", "[head_split][cpu]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  auto plain = build(head_split_resolved({{"preset", "group_add1"}}));
  auto gated = build(head_split_resolved({{"preset", "group_gate_add1"}}));
  plain->initialize(1);
  randomize_parameters(*plain, 2);
  gated->initialize(1);
  auto p = parameters(*plain);
  for (auto& [name, v] : parameters(*gated))
    if (name != "gate_logit") v.data().copy_(p.at(name).data());
  const Tensor x = random_tensor({2, 9, 16}, 3);
  NoGradGuard no_grad;
  const Tensor half = mul_scalar(plain->forward(Var(x)), 0.5).data();
  REQUIRE(rel_error(gated->forward(Var(x)).data(), half) < 1e-14);
}

TEST_CASE("every fusion variant has gradients matching finite differences for both halves' outputs and every weight",
          "[head_split][cpu][grad]") {
  for (const FusionCase& c : fusion_cases({}, 10)) {
    DYNAMIC_SECTION(c.name) {
      auto r = gradcheck([&](const std::vector<Var>& x) { return c.run(x); }, c.inputs);
      INFO(r.report);
      REQUIRE(r.max_error < 1e-7);
    }
  }
}

TEST_CASE("every head_split parameter and the layer input have gradients matching finite differences, for every preset "
          "and a 3:1 ratio (section 10.6)",
          "[head_split][cpu][grad]") {
  std::vector<std::pair<std::string, json>> variants;
  for (const std::string& p : head_split_preset_names()) variants.push_back({p, head_split_resolved({{"preset", p}})});
  const json wide = head_split_ungrouped_blocks();
  variants.push_back({"3:1 group_diff2", head_split_resolved({{"dim_ratio", {3, 1}}}, wide)});
  variants.push_back({"3:1 conc1 with scales", head_split_resolved({{"dim_ratio", {3, 1}}, {"fusion", "conc"}, {"out_proj", 1},
                                                         {"scalar", "scale"}}, wide)});
  require_mixer_gradchecks(variants, 16, 11,
                           [](const json& mixer, int64_t d) -> std::unique_ptr<Mixer> { return build(mixer, d); });
}

TEST_CASE("head_split decoding from the two halves' states equals the parallel forward: single steps and prefills of "
          "0, 1, 5, 17",
          "[head_split][cpu][decode]") {
  for (const char* preset : {"group_diff2", "hymba", "group_gate_add1", "group_conc1"}) {
    ParameterScope f64(Device::cpu(), DType::f64);
    auto layer = build(head_split_resolved({{"preset", preset}}));
    layer->initialize(7);
    randomize_parameters(*layer, 8);
    // 4.9: the KV cache (64 slots of n_kvT (Dqk + Dv)) and the Mamba state ((W - 1) (d_ssmX + 2 N) + H_X N P).
    const int64_t B = 2, slots = 64, n_kvT = 1, Dqk = 4, Dv = 8, W = 4, d_ssmX = 16, N = 4, H_X = 2, P = 8;
    const int64_t per_sequence = slots * n_kvT * (Dqk + Dv) + (W - 1) * (d_ssmX + 2 * N) + H_X * N * P;
    require_mixer_decode_matches_forward(*layer, {.d_model = 16,
                                                  .prefills = {0, 1, 5, 17},
                                                  .state_bytes = B * per_sequence * int64_t(sizeof(double)),
                                                  .name = std::string(preset) + " "});
  }
}

TEST_CASE("a model of head_split, attention and Mamba2 layers decodes token by token to the parallel forward's logits",
          "[head_split][model][cpu][decode]") {
  // d_model 8: n_T 1 of Dqk 4, Dv 8; H_X 1 of P 8.
  const json blocks = head_split_blocks({{"type", "attention"}, {"num_heads", 2}, {"num_kv_heads", 2}, {"head_dim", 4}},
                                  {{"type", "mamba2"}, {"d_ssm", 16}, {"headdim", 8}, {"d_state", 4}});
  auto x = [&](const char* preset) { return head_split_resolved({{"preset", preset}}, blocks, 8, 4); };
  require_decode_matches_forward(small_decode_lm({
      {x("group_diff2"), "swiglu", 12},
      {resolve_test_mixer("attention", blocks["T"]["mixer"], {}), "swiglu", 12},
      {resolve_test_mixer("mamba2", blocks["M"]["mixer"], {}), "swiglu", 12},
      {x("hymba"), "none", 0}}));
}
