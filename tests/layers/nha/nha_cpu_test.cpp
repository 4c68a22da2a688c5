// The nha op on the CPU: gradients of every input for every window regime (nha.md 4), the golden
// files in f64 with omega_L, and the special cases of nha.md 3: window 0 = gsa (golden gsa files),
// window >= T = causal attention with M null keys, M = 0 = sliding-window attention (golden
// attention files), s and g gradients zero on the last w tokens, continuation from a final memory
// and a ring of the last w tokens (the decode identity of nha.md 9), a window-side q and k of its own.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/safetensors.h"
#include "layers/gsa/gsa_op.h"
#include "layers/nha/nha_op.h"
#include "layers/op_test_util.h"
#include "layers/rope/rope_op.h"
#include "layers/softmax_attention/attention_op.h"

using namespace hyb;

namespace {

struct NhaCase {
  Tensor q, k, v, s, g, HK0, HV0, bias;  // optional ones may be undefined
};

NhaCase random_case(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv, int64_t M, bool states,
                    uint64_t seed) {
  NhaCase c{random_tensor({B, T, Hq, D}, seed), random_tensor({B, T, Hkv, D}, seed + 1),
            random_tensor({B, T, Hkv, Dv}, seed + 2)};
  if (M > 0) {
    c.s = random_tensor({B, T, Hkv, M}, seed + 3);
    c.g = uniform_tensor({B, T, Hkv, M}, seed + 4, -0.9, -0.01);
  }
  if (states) {
    c.HK0 = random_tensor({B, Hkv, D, M}, seed + 5);
    c.HV0 = random_tensor({B, Hkv, M, Dv}, seed + 6);
  }
  return c;
}

NhaParams params(int64_t window, int64_t shift, bool rope = true, double scale = 0.5) {
  NhaParams p;
  p.window = window;
  p.shift = shift;
  p.rope = rope;
  p.scale = scale;
  return p;
}

Var leaf(const Tensor& t) { return t.defined() ? Var(t, true) : Var(); }

std::map<std::string, Tensor> run_case(const NhaCase& c, const NhaParams& p, const Tensor& dout) {
  Var q = leaf(c.q), k = leaf(c.k), v = leaf(c.v), s = leaf(c.s), g = leaf(c.g), HK0 = leaf(c.HK0), HV0 = leaf(c.HV0),
      bias = leaf(c.bias);
  NhaVars r = nha(q, k, v, s, g, HK0, HV0, bias, p);
  backward({r.o}, {dout});
  std::map<std::string, Tensor> out{{"o", r.o.data()}, {"dq", q.grad()}, {"dk", k.grad()}, {"dv", v.grad()}};
  if (s.defined()) {
    out["HK"] = r.HK.data();
    out["HV"] = r.HV.data();
    out["ds"] = s.grad();
    out["dg"] = g.grad();
  }
  if (HK0.defined()) {
    out["dHK0"] = HK0.grad();
    out["dHV0"] = HV0.grad();
  }
  if (bias.defined()) out["dbias"] = bias.grad();
  return out;
}

Tensor rotate(const Tensor& x, double theta = 10000.0) {
  return rope_forward(x, rope_table(theta, x.size(3), x.size(1), std::nullopt, Device::cpu()), 0);
}

}  // namespace

TEST_CASE("nha gradients of every input match finite differences in every window regime", "[nha][cpu][grad]") {
  struct Regime {
    const char* name;
    int64_t window, shift, M;
    bool rope, states, bias;
  };
  // T 11, GQA (Hq 4, Hkv 2), D 4, Dv 3: windows below, at and above T, shift on and off, no slots.
  const Regime regimes[] = {
      {"w 3 shift 3", 3, 3, 3, true, true, false},     {"w 0 (gsa)", 0, 0, 3, false, true, false},
      {"w 1", 1, 1, 2, true, false, false},            {"w 3 no token shift", 3, 0, 3, true, true, false},
      {"full window", -1, -1, 3, true, true, false},   {"w 20 > T", 20, 20, 2, true, true, false},
      {"no slots", 4, 4, 0, true, false, false},       {"w 3 no rope, bias", 3, 3, 3, false, true, true},
      {"slots only, shift 3", 0, 3, 3, false, true, false},
  };
  for (const Regime& rg : regimes) {
    DYNAMIC_SECTION(rg.name) {
      NhaCase c = random_case(1, 11, 4, 2, 4, 3, rg.M, rg.states, 20);
      if (rg.bias) c.bias = random_tensor({4, rg.window}, 29, DType::f64, 0.5);
      // gradcheck takes the defined inputs only; slot i of the op reads x[at[i]] or nothing.
      const std::vector<Tensor> all{c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, c.bias};
      std::vector<Tensor> inputs;
      std::vector<int> at;
      for (const Tensor& t : all) {
        at.push_back(t.defined() ? int(inputs.size()) : -1);
        if (t.defined()) inputs.push_back(t);
      }
      auto r = gradcheck(
          [&](const std::vector<Var>& x) {
            auto in = [&](int i) { return at[size_t(i)] < 0 ? Var() : x[size_t(at[size_t(i)])]; };
            NhaVars y = nha(in(0), in(1), in(2), in(3), in(4), in(5), in(6), in(7), params(rg.window, rg.shift, rg.rope));
            std::vector<Var> out{y.o};
            if (y.HK.defined()) {
              out.push_back(y.HK);
              out.push_back(y.HV);
            }
            return out;
          },
          inputs);
      INFO(r.report);
      REQUIRE(r.max_error < 1e-6);
    }
  }
}

TEST_CASE("nha with a window-side q and k of its own: the slots read q, k, the window reads q_window, k_window",
          "[nha][cpu][grad]") {
  NhaCase c = random_case(1, 11, 4, 2, 4, 3, 3, true, 40);
  const Tensor qw = random_tensor(c.q.shape(), 47), kw = random_tensor(c.k.shape(), 48);
  const NhaParams p = params(3, 3);
  SECTION("q_window = q and k_window = k is the op without them") {
    const NhaOutputs a = nha_forward_cpu(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, Tensor(), p);
    const NhaOutputs b = nha_forward_cpu(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, Tensor(), p, c.q, c.k);
    REQUIRE(rel_error(b.o, a.o) == 0.0);
  }
  SECTION("the window side alone moves the window, the slot side alone the slots") {
    // Without slots only the window side counts; with window 0 only the slot side.
    const NhaOutputs win = nha_forward_cpu(c.q, c.k, c.v, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), p, qw, kw);
    const NhaOutputs win_ref = nha_forward_cpu(qw, kw, c.v, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), p);
    REQUIRE(rel_error(win.o, win_ref.o) < 1e-15);
    const NhaOutputs slots = nha_forward_cpu(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, Tensor(), params(0, 3), qw, kw);
    const NhaOutputs slots_ref = nha_forward_cpu(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, Tensor(), params(0, 3));
    REQUIRE(rel_error(slots.o, slots_ref.o) < 1e-15);
  }
  SECTION("gradients of every input, the window side included, match finite differences") {
    auto r = gradcheck(
        [&](const std::vector<Var>& x) {
          NhaVars y = nha(x[0], x[1], x[2], x[3], x[4], x[5], x[6], Var(), p, x[7], x[8]);
          return std::vector<Var>{y.o, y.HK, y.HV};
        },
        {c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, qw, kw});
    INFO(r.report);
    REQUIRE(r.max_error < 1e-6);
  }
}

TEST_CASE("the golden nha files match in f64: o, final memories, omega_L and every input gradient", "[nha][cpu][golden]") {
  for (const char* name : {"nha_9", "nha_10"}) {
    DYNAMIC_SECTION(name) {
      const SafetensorsFile f = load_safetensors(str_cat(HYBRID_SOURCE_DIR, "/tests/golden/", name, ".safetensors"));
      const int64_t w = std::stoll(f.metadata.at("window"));
      NhaParams p = params(w, std::stoll(f.metadata.at("token_shift")), true, std::stod(f.metadata.at("scale")));
      p.rope_theta = std::stod(f.metadata.at("rope_theta"));
      p.long_ratio = true;
      NhaCase c{f.get("in.q"), f.get("in.k"), f.get("in.v"), f.get("in.s"), f.get("in.g")};
      auto got = run_case(c, p, f.get("grad_out.o"));
      REQUIRE(rel_error(got.at("o"), f.get("out.o")) < 1e-12);
      REQUIRE(rel_error(got.at("HK"), f.get("out.final_state0")) < 1e-12);
      REQUIRE(rel_error(got.at("HV"), f.get("out.final_state1")) < 1e-12);
      for (const char* in : {"q", "k", "v", "s", "g"}) {
        INFO(in);
        REQUIRE(rel_error(got.at(str_cat("d", in)), f.get(str_cat("grad_in.", in))) < 1e-12);
      }
      const NhaOutputs o = nha_forward(c.q, c.k, c.v, c.s, c.g, Tensor(), Tensor(), Tensor(), p, nullptr);
      REQUIRE(rel_error(o.long_ratio, f.get("stat.long_ratio")) < 1e-12);
      // s and g of the last w tokens never reach the memory: their gradients are exactly zero.
      const int64_t T = c.q.size(1);
      for (const char* n : {"ds", "dg"})
        for (double x : got.at(n).narrow(1, T - w, w).contiguous().to_double_vector()) REQUIRE(x == 0.0);
    }
  }
}

TEST_CASE("nha with window 0 reproduces the golden gsa files and the gsa op, gradients and memories included",
          "[nha][cpu][golden]") {
  for (const char* name : {"gsa_3", "gsa_4"}) {
    DYNAMIC_SECTION(name) {
      const SafetensorsFile f = load_safetensors(str_cat(HYBRID_SOURCE_DIR, "/tests/golden/", name, ".safetensors"));
      NhaCase c{f.get("in.q"), f.get("in.k"), f.get("in.v"), f.get("in.s"), f.get("in.g")};
      // RoPE is irrelevant without a window; leave it on to show it.
      auto got = run_case(c, params(0, 0, true, std::stod(f.metadata.at("scale"))), f.get("grad_out.o"));
      REQUIRE(rel_error(got.at("o"), f.get("out.o")) < 1e-12);
      REQUIRE(rel_error(got.at("HK"), f.get("out.final_state0")) < 1e-12);
      REQUIRE(rel_error(got.at("HV"), f.get("out.final_state1")) < 1e-12);
      for (const char* in : {"q", "k", "v", "s", "g"})
        REQUIRE(rel_error(got.at(str_cat("d", in)), f.get(str_cat("grad_in.", in))) < 1e-12);
    }
  }
  // With initial memories too, against the gsa op.
  NhaCase c = random_case(2, 17, 4, 2, 5, 3, 4, true, 30);
  GsaParams gp;
  gp.scale = 0.5;
  const GsaOutputs ref = gsa_forward(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, gp, nullptr);
  const NhaOutputs got = nha_forward(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, Tensor(), params(0, 0), nullptr);
  REQUIRE(rel_error(got.o, ref.o) < 1e-13);
  REQUIRE(rel_error(got.HK, ref.Hk) < 1e-13);
  REQUIRE(rel_error(got.HV, ref.Hv) < 1e-13);
}

TEST_CASE("nha with window >= T is causal attention on RoPE'd q, k plus M null keys, and omega_L = M / (M + sum e^b)",
          "[nha][cpu]") {
  const int64_t B = 2, T = 13, Hq = 2, Hkv = 1, D = 6, Dv = 3, M = 5;
  const double scale = 0.4;
  NhaCase c = random_case(B, T, Hq, Hkv, D, Dv, M, false, 40);
  const std::vector<double> qr = rotate(c.q).to_double_vector(), kr = rotate(c.k).to_double_vector(),
                            v = c.v.to_double_vector();
  for (int64_t window : {int64_t(-1), T, T + 7}) {
    NhaParams p = params(window, window, true, scale);
    p.long_ratio = true;
    const NhaOutputs r = nha_forward(c.q, c.k, c.v, c.s, c.g, Tensor(), Tensor(), Tensor(), p, nullptr);
    const std::vector<double> o = r.o.to_double_vector(), om = r.long_ratio.to_double_vector();
    for (double x : r.HK.to_double_vector()) REQUIRE(x == 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hq; ++h) {
          double Z = double(M);
          std::vector<double> acc(size_t(Dv), 0.0);
          for (int64_t j = 0; j <= t; ++j) {
            double z = 0;
            for (int64_t i = 0; i < D; ++i) z += qr[size_t(((b * T + t) * Hq + h) * D + i)] * kr[size_t((b * T + j) * D + i)];
            const double e = std::exp(scale * z);
            Z += e;
            for (int64_t c2 = 0; c2 < Dv; ++c2) acc[size_t(c2)] += e * v[size_t((b * T + j) * Dv + c2)];
          }
          for (int64_t c2 = 0; c2 < Dv; ++c2)
            REQUIRE(o[size_t(((b * T + t) * Hq + h) * Dv + c2)] == Approx(acc[size_t(c2)] / Z).epsilon(1e-12).margin(1e-14));
          REQUIRE(om[size_t((b * T + t) * Hq + h)] == Approx(double(M) / Z).epsilon(1e-12));
        }
  }
}

TEST_CASE("nha without slots is sliding-window attention: the golden attention files without RoPE", "[nha][cpu][golden]") {
  for (const char* name : {"attention_1", "attention_2"}) {
    DYNAMIC_SECTION(name) {
      const SafetensorsFile f = load_safetensors(str_cat(HYBRID_SOURCE_DIR, "/tests/golden/", name, ".safetensors"));
      const int64_t w = std::stoll(f.metadata.at("window"));
      NhaCase c{f.get("in.q"), f.get("in.k"), f.get("in.v")};
      // attention's window 0 is full causal attention: nha's -1.
      auto got = run_case(c, params(w == 0 ? -1 : w, 0, false, std::stod(f.metadata.at("scale"))), f.get("grad_out.o"));
      REQUIRE(rel_error(got.at("o"), f.get("out.o")) < 1e-12);
      for (const char* in : {"q", "k", "v"}) REQUIRE(rel_error(got.at(str_cat("d", in)), f.get(str_cat("grad_in.", in))) < 1e-12);
    }
  }
  // With RoPE: nha(q, k) without slots equals attention(RoPE(q), RoPE(k)).
  NhaCase c = random_case(1, 19, 2, 2, 8, 4, 0, false, 50);
  AttentionParams ap;
  ap.scale = 0.3;
  ap.window = 5;
  const Tensor ref = attention_forward(rotate(c.q), rotate(c.k), c.v, ap, nullptr).o;
  const Tensor got = nha_forward(c.q, c.k, c.v, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), params(5, 5, true, 0.3),
                                 nullptr).o;
  REQUIRE(rel_error(got, ref) < 1e-13);
}

TEST_CASE("nha without token shift keeps every token in the memory: window 0 with shift 0 plus the window counted twice",
          "[nha][cpu]") {
  // shift 0 and window w: the memory is GK_t (the current token in it), so the memory part of o equals
  // the gsa memory part, and the final memory equals gsa's over all T tokens.
  NhaCase c = random_case(1, 14, 2, 2, 4, 3, 3, true, 60);
  GsaParams gp;
  gp.scale = 0.5;
  const GsaOutputs ref = gsa_forward(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, gp, nullptr);
  const NhaOutputs got = nha_forward(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, Tensor(), params(4, 0), nullptr);
  REQUIRE(rel_error(got.HK, ref.Hk) < 1e-13);
  REQUIRE(rel_error(got.HV, ref.Hv) < 1e-13);
  REQUIRE(rel_error(got.o, ref.o) > 1e-3);  // the window changes the output
  const NhaOutputs shifted = nha_forward(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, Tensor(), params(4, 4), nullptr);
  REQUIRE(rel_error(shifted.o, got.o) > 1e-3);
}

TEST_CASE("nha continued from a final memory and a ring of the last w tokens equals one run over the whole sequence",
          "[nha][cpu][decode]") {
  // The decode identity of nha.md 9: the second call sees [ring ; new rows] with rope_offset = T1 - ring.
  const int64_t B = 2, T = 25, Hq = 2, Hkv = 1, D = 4, Dv = 3, M = 3;
  NhaCase c = random_case(B, T, Hq, Hkv, D, Dv, M, true, 70);
  for (int64_t w : {1, 4, 9}) {
    for (int64_t T1 : {3, 12}) {
      DYNAMIC_SECTION("w " << w << " T1 " << T1) {
        const NhaOutputs whole = nha_forward(c.q, c.k, c.v, c.s, c.g, c.HK0, c.HV0, Tensor(), params(w, w), nullptr);
        auto rows = [](const Tensor& x, int64_t t0, int64_t n) { return x.narrow(1, t0, n).contiguous(); };
        const NhaOutputs first = nha_forward(rows(c.q, 0, T1), rows(c.k, 0, T1), rows(c.v, 0, T1), rows(c.s, 0, T1),
                                             rows(c.g, 0, T1), c.HK0, c.HV0, Tensor(), params(w, w), nullptr);
        const int64_t ring = std::min(w, T1), t0 = T1 - ring;
        // With fewer than w tokens seen, the memory is still the initial one.
        NhaParams p = params(w, w);
        p.rope_offset = t0;
        const NhaOutputs second =
            nha_forward(rows(c.q, t0, T - t0), rows(c.k, t0, T - t0), rows(c.v, t0, T - t0), rows(c.s, t0, T - t0),
                        rows(c.g, t0, T - t0), first.HK, first.HV, Tensor(), p, nullptr);
        REQUIRE(rel_error(rows(first.o, 0, T1), rows(whole.o, 0, T1)) < 1e-13);
        REQUIRE(rel_error(rows(second.o, ring, T - T1), rows(whole.o, T1, T - T1)) < 1e-13);
        REQUIRE(rel_error(second.HK, whole.HK) < 1e-13);
        REQUIRE(rel_error(second.HV, whole.HV) < 1e-13);
      }
    }
  }
}

TEST_CASE("the nha window bias adds beta[h, t - j] to the window logits", "[nha][cpu]") {
  // A bias of -inf-like -1e4 at every distance but 0 leaves only the current token in the window.
  NhaCase c = random_case(1, 9, 2, 2, 4, 3, 0, false, 80);
  std::vector<double> bias(2 * 4, -1e4);
  bias[0] = bias[4] = 0.0;
  const Tensor o = nha_forward(c.q, c.k, c.v, Tensor(), Tensor(), Tensor(), Tensor(),
                               Tensor::from_vector<double>(bias, {2, 4}), params(4, 4, false), nullptr).o;
  REQUIRE(rel_error(o, c.v) < 1e-12);
}

TEST_CASE("the f32 nha agrees with f64 and stays finite with strong gates", "[nha][cpu]") {
  NhaCase c = random_case(1, 30, 2, 1, 8, 4, 6, true, 90);
  std::vector<double> g = random_tensor(c.g.shape(), 91).to_double_vector();
  for (double& x : g) x = (std::min(x, 0.0) - std::log1p(std::exp(-std::abs(x)))) / 0.1;
  c.g = Tensor::from_vector<double>(g, c.g.shape());
  Tensor dout = random_tensor({1, 30, 2, 4}, 92);
  auto a = run_case(c, params(5, 5), dout);
  NhaCase c32{c.q.to(DType::f32), c.k.to(DType::f32), c.v.to(DType::f32), c.s.to(DType::f32), c.g.to(DType::f32),
              c.HK0.to(DType::f32), c.HV0.to(DType::f32)};
  auto b = run_case(c32, params(5, 5), dout.to(DType::f32));
  for (const auto& [name, t] : a) {
    INFO(name);
    for (double x : b.at(name).to_double_vector()) REQUIRE(std::isfinite(x));
    REQUIRE(rel_error(b.at(name), t) < 1e-5);
  }
}

TEST_CASE("nha rejects inputs that do not fit, naming the op, the key and the shapes", "[nha][cpu]") {
  NhaCase c = random_case(2, 5, 4, 2, 4, 2, 3, false, 100);
  REQUIRE_THROWS_WITH(nha_forward(c.q, c.k.narrow(3, 0, 2), c.v, c.s, c.g, Tensor(), Tensor(), Tensor(), params(2, 2), nullptr),
                      Catch::Contains("nha_forward") && Catch::Contains("(2, 5, 2, 2)"));
  REQUIRE_THROWS_WITH(nha_forward(c.q, c.k, c.v, c.s, Tensor(), Tensor(), Tensor(), Tensor(), params(2, 2), nullptr),
                      Catch::Contains("both s and g"));
  REQUIRE_THROWS_WITH(nha_forward(c.q, c.k, c.v, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), params(0, 0), nullptr),
                      Catch::Contains("no slots (M = 0) and no window"));
  REQUIRE_THROWS_WITH(nha_forward(c.q, c.k, c.v, c.s, c.g, Tensor(), Tensor(), random_tensor({4, 1}, 1), params(2, 2), nullptr),
                      Catch::Contains("window bias is (4, 1)"));
  REQUIRE_THROWS_WITH(nha_forward(c.q, c.k, c.v, c.s, c.g, Tensor(), Tensor(), Tensor(), params(-2, 2), nullptr),
                      Catch::Contains("window must be >= 0 or -1"));
  REQUIRE_THROWS_WITH(nha_forward(c.q.narrow(3, 0, 3), c.k.narrow(3, 0, 3), c.v, c.s, c.g, Tensor(), Tensor(), Tensor(),
                                  params(2, 2), nullptr),
                      Catch::Contains("RoPE needs an even head dim"));
}
