// The softmax-attention core op on the CPU: finite-difference gradchecks in f64 and the
// invariants of attention.md section 9 (2, 3, 4, 5, 7, 9) plus the bottom-right alignment,
// strided inputs and the error messages. The golden files run in tests/golden_test.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/norm/l2norm_op.h"
#include "layers/norm/rmsnorm_op.h"
#include "layers/rope/rope_op.h"
#include "layers/softmax_attention/attention_op.h"
#include "layers/softmax_attention/logit_scale_op.h"

using namespace hyb;

namespace {

struct Case {
  int64_t B, T, Hq, Hkv, D, Dv;
};

struct Inputs {
  Tensor q, k, v;
};

Inputs random_inputs(const Case& c, uint64_t seed, DType dt = DType::f64) {
  return {random_tensor({c.B, c.T, c.Hq, c.D}, seed, dt), random_tensor({c.B, c.T, c.Hkv, c.D}, seed + 1, dt),
          random_tensor({c.B, c.T, c.Hkv, c.Dv}, seed + 2, dt)};
}

bool all_zero(const Tensor& t) {
  for (double x : t.to_double_vector())
    if (x != 0.0) return false;
  return true;
}

struct ForwardBackward {
  AttentionOutputs out;
  AttentionGrads grads;
};

// Forward, then backward with the given dO (and dlse when defined), all gradients.
ForwardBackward run(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p, const Tensor& dout,
                    const Tensor& dlse = Tensor()) {
  AttentionSaved s;
  ForwardBackward r;
  r.out = attention_forward(q, k, v, p, &s);
  r.grads = attention_backward(s, dout, dlse, GradMask{0b111});
  return r;
}

// k (B, T, Hkv, D) -> (B, T, Hkv * G, D) with head h = k head h / G (repeat_interleave).
Tensor repeat_heads(const Tensor& k, int64_t G) {
  const int64_t B = k.size(0), T = k.size(1), H = k.size(2), D = k.size(3);
  Tensor r = Tensor::empty({B, T, H * G, D}, k.dtype());
  for (int64_t h = 0; h < H * G; ++h) r.select(2, h).copy_(k.select(2, h / G));
  return r;
}

// Sum of x (B, T, H * G, D) over each group of G consecutive heads -> (B, T, H, D).
Tensor sum_groups(const Tensor& x, int64_t G) {
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2) / G, D = x.size(3);
  std::vector<double> in = x.to_double_vector(), out(size_t(B * T * H * D), 0.0);
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t h = 0; h < H * G; ++h)
      for (int64_t d = 0; d < D; ++d) out[size_t((bt * H + h / G) * D + d)] += in[size_t((bt * H * G + h) * D + d)];
  return Tensor::from_vector(out, {B, T, H, D});
}

// x (B, T, H, D) restricted to the positions idx along T.
Tensor take_positions(const Tensor& x, const std::vector<int64_t>& idx) {
  Tensor r = Tensor::empty({x.size(0), int64_t(idx.size()), x.size(2), x.size(3)}, x.dtype());
  for (size_t i = 0; i < idx.size(); ++i) r.select(1, int64_t(i)).copy_(x.select(1, idx[i]));
  return r;
}

}  // namespace

TEST_CASE("the visible key ranges enumerate exactly visible() of attention.md 1", "[attention][cpu]") {
  RngStream rng(7, "test.attention.ranges");
  for (int it = 0; it < 2000; ++it) {
    const int64_t p = rng.below(80), w = rng.below(20), S = rng.below(12);
    const AttentionKeyRanges r = attention_key_ranges(p, w, S);
    REQUIRE(r.sink_end <= r.lo);
    for (int64_t j = 0; j < 90; ++j) {
      const bool in_ranges = j < r.sink_end || (j >= r.lo && j <= r.hi);
      INFO("p " << p << " w " << w << " S " << S << " j " << j);
      REQUIRE(in_ranges == attention_visible(p, j, w, S));
    }
  }
}

TEST_CASE("attention gradients of q, k, v and the lse output match finite differences", "[attention][cpu][grad]") {
  struct GradCase {
    Case c;
    int64_t window, sinks;
  };
  const std::vector<GradCase> cases = {
      {{2, 37, 4, 2, 6, 5}, 0, 0},   // GQA, causal, Dv != D
      {{2, 37, 4, 2, 6, 6}, 8, 3},   // window with sinks
      {{1, 70, 3, 1, 5, 5}, 16, 0},  // MQA, window only, T = 70
      {{2, 1, 2, 2, 7, 7}, 4, 2},    // a single token
      {{1, 29, 6, 3, 10, 4}, 1, 2},  // window 1 plus sinks
  };
  for (const GradCase& gc : cases) {
    const Case& c = gc.c;
    DYNAMIC_SECTION("B" << c.B << "-T" << c.T << "-Hq" << c.Hq << "-Hkv" << c.Hkv << "-D" << c.D << "-Dv" << c.Dv
                        << "-w" << gc.window << "-S" << gc.sinks) {
      AttentionParams p;
      p.window = gc.window;
      p.sinks = gc.sinks;
      Inputs in = random_inputs(c, 100 + uint64_t(c.T));
      // Both outputs are weighted by random vectors, so lse receives an upstream dlse.
      auto r = gradcheck(
          [&](const std::vector<Var>& x) {
            AttentionVars a = attention_with_lse(x[0], x[1], x[2], p);
            return std::vector<Var>{a.o, a.lse};
          },
          {in.q, in.k, in.v});
      INFO(r.report);
      REQUIRE(r.max_error < 1e-6);
    }
  }
}

TEST_CASE("attention gradients with fewer queries than keys (bottom-right aligned) match finite differences",
          "[attention][cpu][grad]") {
  AttentionParams p;
  p.window = 6;
  p.sinks = 2;
  p.scale = 0.3;
  Tensor q = random_tensor({2, 5, 4, 6}, 41), k = random_tensor({2, 19, 2, 6}, 42), v = random_tensor({2, 19, 2, 3}, 43);
  auto r = gradcheck(
      [&](const std::vector<Var>& x) {
        AttentionVars a = attention_with_lse(x[0], x[1], x[2], p);
        return std::vector<Var>{a.o, a.lse};
      },
      {q, k, v});
  INFO(r.report);
  REQUIRE(r.max_error < 1e-6);
}

TEST_CASE("the per-query-head scale and its gradient match finite differences", "[attention][cpu][grad]") {
  AttentionParams p;
  p.window = 9;
  p.sinks = 1;
  const Case c{2, 23, 4, 2, 6, 6};
  Inputs in = random_inputs(c, 51);
  Tensor scale_h = random_tensor({4}, 54, DType::f64, 0.2, 0.6);
  auto r = gradcheck(
      [&](const std::vector<Var>& x) {
        AttentionVars a = attention_with_lse(x[0], x[1], x[2], x[3], p);
        return std::vector<Var>{a.o, a.lse};
      },
      {in.q, in.k, in.v, scale_h});
  INFO(r.report);
  REQUIRE(r.max_error < 1e-6);
}

TEST_CASE("a per-head scale vector with equal entries equals the scalar scale", "[attention][cpu]") {
  const Case c{2, 37, 4, 2, 12, 12};
  Inputs in = random_inputs(c, 61);
  Tensor dout = random_tensor({2, 37, 4, 12}, 64);
  AttentionParams scalar;
  scalar.scale = 0.37;
  AttentionParams vec;
  vec.scale_h = Tensor::full({4}, 0.37, DType::f64);
  ForwardBackward a = run(in.q, in.k, in.v, scalar, dout), b = run(in.q, in.k, in.v, vec, dout);
  REQUIRE(rel_error(b.out.o, a.out.o) < 1e-14);
  REQUIRE(rel_error(b.out.lse, a.out.lse) < 1e-14);
  REQUIRE(rel_error(b.grads.dq, a.grads.dq) < 1e-14);
  // The default scale is 1/sqrt(D) of q/k, not of v.
  AttentionParams dflt;
  scalar.scale = 1 / std::sqrt(12.0);
  REQUIRE(rel_error(attention_forward(in.q, in.k, in.v, dflt, nullptr).o,
                   attention_forward(in.q, in.k, in.v, scalar, nullptr).o) < 1e-15);
}

TEST_CASE("window >= T, sinks >= T and sinks without a window all equal full causal attention", "[attention][cpu]") {
  for (int64_t T : {1, 37, 70}) {
    DYNAMIC_SECTION("T" << T) {
      const Case c{2, T, 4, 2, 6, 6};
      Inputs in = random_inputs(c, 70 + uint64_t(T));
      Tensor dout = random_tensor({2, T, 4, 6}, 73), dlse = random_tensor({2, 4, T}, 74);
      const ForwardBackward full = run(in.q, in.k, in.v, AttentionParams{}, dout, dlse);
      auto same_as_full = [&](int64_t window, int64_t sinks) {
        AttentionParams p;
        p.window = window;
        p.sinks = sinks;
        const ForwardBackward r = run(in.q, in.k, in.v, p, dout, dlse);
        INFO("window " << window << " sinks " << sinks);
        CHECK(rel_error(r.out.o, full.out.o) < 1e-14);
        CHECK(rel_error(r.out.lse, full.out.lse) < 1e-14);
        CHECK(rel_error(r.grads.dq, full.grads.dq) < 1e-14);
        CHECK(rel_error(r.grads.dk, full.grads.dk) < 1e-14);
        CHECK(rel_error(r.grads.dv, full.grads.dv) < 1e-14);
      };
      same_as_full(T, 0);
      same_as_full(T + 5, 3);
      same_as_full(T > 1 ? T / 2 : 1, T);
      same_as_full(3, T + 2);
      same_as_full(0, 4);
    }
  }
  SECTION("and a window shorter than T does not") {
    const Case c{1, 37, 2, 2, 6, 6};
    Inputs in = random_inputs(c, 79);
    AttentionParams p;
    p.window = 36;
    REQUIRE(rel_error(attention_forward(in.q, in.k, in.v, p, nullptr).o,
                     attention_forward(in.q, in.k, in.v, AttentionParams{}, nullptr).o) > 1e-6);
  }
}

TEST_CASE("window 1 returns v of the query's kv head, zero dq and dk, and dv summed over the group",
          "[attention][cpu]") {
  for (DType dt : {DType::f64, DType::f32}) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      const Case c{2, 37, 6, 2, 9, 7};
      Inputs in = random_inputs(c, 81, dt);
      Tensor dout = random_tensor({2, 37, 6, 7}, 84, dt);
      AttentionParams p;
      p.window = 1;
      const ForwardBackward r = run(in.q, in.k, in.v, p, dout);
      std::vector<double> o = r.out.o.to_double_vector(), v = in.v.to_double_vector();
      for (int64_t bt = 0; bt < 2 * 37; ++bt)
        for (int64_t h = 0; h < 6; ++h)
          for (int64_t e = 0; e < 7; ++e) REQUIRE(o[size_t((bt * 6 + h) * 7 + e)] == v[size_t((bt * 2 + h / 3) * 7 + e)]);
      REQUIRE(all_zero(r.grads.dq));
      REQUIRE(all_zero(r.grads.dk));
      // On the f32 path P is rebuilt from the f32-rounded lse, so it is 1 only to f32 precision.
      REQUIRE(rel_error(r.grads.dv, sum_groups(dout, 3)) < (dt == DType::f64 ? 1e-15 : 1e-6));
    }
  }
}

TEST_CASE("GQA equals MHA on k and v repeated over each group, with dk and dv summed over the group",
          "[attention][cpu]") {
  for (int64_t G : {1, 2, 4}) {
    DYNAMIC_SECTION("G" << G) {
      const Case c{2, 37, 4, 4 / G, 10, 6};
      Inputs in = random_inputs(c, 90 + uint64_t(G));
      Tensor dout = random_tensor({2, 37, 4, 6}, 95), dlse = random_tensor({2, 4, 37}, 96);
      AttentionParams p;
      p.window = 11;
      p.sinks = 2;
      const ForwardBackward gqa = run(in.q, in.k, in.v, p, dout, dlse);
      const ForwardBackward mha = run(in.q, repeat_heads(in.k, G), repeat_heads(in.v, G), p, dout, dlse);
      REQUIRE(rel_error(gqa.out.o, mha.out.o) < 1e-14);
      REQUIRE(rel_error(gqa.out.lse, mha.out.lse) < 1e-14);
      REQUIRE(rel_error(gqa.grads.dq, mha.grads.dq) < 1e-14);
      REQUIRE(rel_error(gqa.grads.dk, sum_groups(mha.grads.dk, G)) < 1e-14);
      REQUIRE(rel_error(gqa.grads.dv, sum_groups(mha.grads.dv, G)) < 1e-14);
    }
  }
}

TEST_CASE("attention over two disjoint key sets merged through lse equals attention over their union",
          "[attention][cpu]") {
  // One query at the last position sees every key, so any subset of keys is a valid key set.
  const int64_t B = 2, Tk = 41, Hq = 4, Hkv = 2, D = 6;
  Tensor q = random_tensor({B, 1, Hq, D}, 101), k = random_tensor({B, Tk, Hkv, D}, 102),
         v = random_tensor({B, Tk, Hkv, D}, 103);
  std::vector<int64_t> a, b;
  RngStream rng(104, "test.attention.split");
  for (int64_t j = 0; j < Tk; ++j) (rng.below(3) == 0 ? a : b).push_back(j);
  REQUIRE(!a.empty());
  REQUIRE(!b.empty());
  AttentionParams p;
  const AttentionOutputs all = attention_forward(q, k, v, p, nullptr);
  const AttentionOutputs ra = attention_forward(q, take_positions(k, a), take_positions(v, a), p, nullptr);
  const AttentionOutputs rb = attention_forward(q, take_positions(k, b), take_positions(v, b), p, nullptr);
  std::vector<double> la = ra.lse.to_double_vector(), lb = rb.lse.to_double_vector();
  std::vector<double> oa = ra.o.to_double_vector(), ob = rb.o.to_double_vector();
  std::vector<double> lse(la.size()), o(oa.size());
  for (int64_t bh = 0; bh < B * Hq; ++bh) {
    const double L = std::max(la[size_t(bh)], lb[size_t(bh)]) +
                     std::log1p(std::exp(-std::abs(la[size_t(bh)] - lb[size_t(bh)])));
    lse[size_t(bh)] = L;
    // lse is (B, Hq, 1) and o is (B, 1, Hq, D): the same (b, h) order.
    for (int64_t d = 0; d < D; ++d) {
      const size_t at = size_t(bh * D + d);
      o[at] = std::exp(la[size_t(bh)] - L) * oa[at] + std::exp(lb[size_t(bh)] - L) * ob[at];
    }
  }
  REQUIRE(rel_error(Tensor::from_vector(lse, {B, Hq, 1}), all.lse) < 1e-14);
  REQUIRE(rel_error(Tensor::from_vector(o, {B, 1, Hq, D}), all.o) < 1e-14);
}

TEST_CASE("queries aligned bottom-right reproduce the last rows of the full attention", "[attention][cpu]") {
  const Case c{2, 45, 4, 2, 6, 5};
  Inputs in = random_inputs(c, 111);
  Tensor dout_full = random_tensor({2, 45, 4, 5}, 114);
  AttentionParams p;
  p.window = 7;
  p.sinks = 3;
  const ForwardBackward full = run(in.q, in.k, in.v, p, dout_full);
  for (int64_t Tq : {1, 12, 45}) {
    DYNAMIC_SECTION("Tq" << Tq) {
      Tensor q_tail = in.q.narrow(1, 45 - Tq, Tq);
      const AttentionOutputs r = attention_forward(q_tail, in.k, in.v, p, nullptr);
      REQUIRE(rel_error(r.o, full.out.o.narrow(1, 45 - Tq, Tq).contiguous()) < 1e-15);
      REQUIRE(rel_error(r.lse, full.out.lse.narrow(2, 45 - Tq, Tq).contiguous()) < 1e-15);
    }
  }
}

TEST_CASE("q, k and v as strided views into one fused QKV buffer give the contiguous results", "[attention][cpu]") {
  for (DType dt : {DType::f64, DType::f32}) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      const int64_t B = 2, T = 37, Hq = 4, Hkv = 2, D = 6;
      Tensor qkv = random_tensor({B, T, Hq + 2 * Hkv, D}, 121, dt);
      Tensor q = qkv.narrow(2, 0, Hq), k = qkv.narrow(2, Hq, Hkv), v = qkv.narrow(2, Hq + Hkv, Hkv);
      REQUIRE(!q.is_contiguous());
      Tensor dout_buf = random_tensor({B, Hq, T, D}, 124, dt);
      Tensor dout = dout_buf.permute({0, 2, 1, 3});  // a non-contiguous dO as well
      AttentionParams p;
      p.window = 10;
      p.sinks = 1;
      const ForwardBackward strided = run(q, k, v, p, dout);
      const ForwardBackward dense = run(q.contiguous(), k.contiguous(), v.contiguous(), p, dout.contiguous());
      REQUIRE(rel_error(strided.out.o, dense.out.o) == 0.0);
      REQUIRE(rel_error(strided.out.lse, dense.out.lse) == 0.0);
      REQUIRE(rel_error(strided.grads.dq, dense.grads.dq) == 0.0);
      REQUIRE(rel_error(strided.grads.dk, dense.grads.dk) == 0.0);
      REQUIRE(rel_error(strided.grads.dv, dense.grads.dv) == 0.0);
    }
  }
}

TEST_CASE("every row's probabilities sum to one under its lse, which bounds the row's logits", "[attention][cpu]") {
  const int64_t B = 2, T = 37, Hq = 4, Hkv = 2, D = 6, w = 9, S = 4;
  const double scale = 0.8;
  Tensor q = random_tensor({B, T, Hq, D}, 131), k = random_tensor({B, T, Hkv, D}, 132), v = random_tensor({B, T, Hkv, D}, 133);
  AttentionParams p;
  p.window = w;
  p.sinks = S;
  p.scale = scale;
  std::vector<double> lse = attention_forward(q, k, v, p, nullptr).lse.to_double_vector();
  std::vector<double> qv = q.to_double_vector(), kv = k.to_double_vector();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const double L = lse[size_t((b * Hq + h) * T + i)];
        double sum = 0, mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          if (!attention_visible(i, j, w, S)) continue;
          double s = 0;
          for (int64_t d = 0; d < D; ++d)
            s += qv[size_t(((b * T + i) * Hq + h) * D + d)] * kv[size_t(((b * T + j) * Hkv + h / 2) * D + d)];
          s *= scale;
          sum += std::exp(s - L);
          mx = std::max(mx, s);
        }
        REQUIRE(sum == Approx(1.0).epsilon(1e-13));
        REQUIRE(L >= mx);
      }
}

TEST_CASE("the f32 path agrees with the f64 path", "[attention][cpu]") {
  const Case c{2, 70, 4, 2, 20, 12};
  Inputs in = random_inputs(c, 141);
  Tensor dout = random_tensor({2, 70, 4, 12}, 144), dlse = random_tensor({2, 4, 70}, 145);
  AttentionParams p;
  p.window = 24;
  p.sinks = 5;
  const ForwardBackward r64 = run(in.q, in.k, in.v, p, dout, dlse);
  const ForwardBackward r32 = run(in.q.to(DType::f32), in.k.to(DType::f32), in.v.to(DType::f32), p,
                                  dout.to(DType::f32), dlse.to(DType::f32));
  REQUIRE(r32.out.o.dtype() == DType::f32);
  REQUIRE(r32.out.lse.dtype() == DType::f32);
  REQUIRE(rel_error(r32.out.o, r64.out.o) < 1e-6);
  REQUIRE(rel_error(r32.out.lse, r64.out.lse) < 1e-6);
  REQUIRE(rel_error(r32.grads.dq, r64.grads.dq) < 1e-5);
  REQUIRE(rel_error(r32.grads.dk, r64.grads.dk) < 1e-5);
  REQUIRE(rel_error(r32.grads.dv, r64.grads.dv) < 1e-5);
}

TEST_CASE("two cpu backward runs are bitwise identical", "[attention][cpu]") {
  const Case c{2, 70, 6, 2, 12, 12};
  Inputs in = random_inputs(c, 151, DType::f32);
  Tensor dout = random_tensor({2, 70, 6, 12}, 154, DType::f32);
  AttentionParams p;
  p.deterministic = true;
  const ForwardBackward a = run(in.q, in.k, in.v, p, dout), b = run(in.q, in.k, in.v, p, dout);
  REQUIRE(rel_error(a.grads.dq, b.grads.dq) == 0.0);
  REQUIRE(rel_error(a.grads.dk, b.grads.dk) == 0.0);
  REQUIRE(rel_error(a.grads.dv, b.grads.dv) == 0.0);
}

TEST_CASE("the qk-norm path (per-head RMSNorm with gains, then RoPE) has gradients matching finite differences",
          "[attention][qk_norm][cpu][grad]") {
  const Case c{2, 21, 4, 2, 6, 6};
  Inputs in = random_inputs(c, 161);
  const RopeTable tab = rope_table(10000.0, 6, 64, std::nullopt, Device::cpu());
  AttentionParams p;
  p.window = 8;
  p.sinks = 1;
  auto r = gradcheck(
      [&](const std::vector<Var>& x) {
        Var q = rope(rmsnorm(x[0], x[3], 1e-5), tab);
        Var k = rope(rmsnorm(x[1], x[4], 1e-5), tab);
        return std::vector<Var>{attention(q, k, x[2], p)};
      },
      {in.q, in.k, in.v, random_tensor({6}, 164, DType::f64, 0.3, 1.0), random_tensor({6}, 165, DType::f64, 0.3, 1.0)});
  INFO(r.report);
  REQUIRE(r.max_error < 1e-6);
}

TEST_CASE("scaled-cosine attention gradients of q, k, v and theta match finite differences, zero above the clamp",
          "[attention][cosine][cpu][grad]") {
  const Case c{2, 19, 4, 2, 6, 5};
  Inputs in = random_inputs(c, 171);
  // Head 2 sits above the clamp ln 100 = 4.605: its tau is 100 and its dtheta must be exactly 0.
  Tensor theta = Tensor::from_vector(std::vector<double>{std::log(10.0), 1.1, 5.3, 3.0}, {4});
  const RopeTable tab = rope_table(10000.0, 6, 64, std::nullopt, Device::cpu());
  AttentionParams p;
  p.window = 7;
  p.sinks = 2;
  auto cosine = [&](const std::vector<Var>& x) {
    Var q = rope(l2norm(x[0]), tab), k = rope(l2norm(x[1]), tab);
    AttentionVars a = attention_with_lse(q, k, x[2], logit_scale(x[3], 100.0), p);
    return std::vector<Var>{a.o, a.lse};
  };
  auto r = gradcheck(cosine, {in.q, in.k, in.v, theta});
  INFO(r.report);
  REQUIRE(r.max_error < 1e-6);

  Var th(theta.clone(), true), q(in.q), k(in.k), v(in.v);
  std::vector<Var> out = cosine({q, k, v, th});
  backward(out[0], random_tensor(out[0].shape(), 174));
  std::vector<double> dtheta = th.grad().to_double_vector();
  REQUIRE(dtheta[2] == 0.0);
  for (int h : {0, 1, 3}) REQUIRE(dtheta[size_t(h)] != 0.0);
}

TEST_CASE("scaled-cosine attention is invariant to scaling any q or k vector and bounds its logits by tau <= 100",
          "[attention][cosine][cpu]") {
  const Case c{2, 37, 4, 2, 10, 10};
  Inputs in = random_inputs(c, 181);
  Tensor theta = Tensor::from_vector(std::vector<double>{std::log(10.0), 0.5, 6.0, std::log(100.0)}, {4});
  AttentionParams p;
  p.scale_h = logit_scale_forward(theta, 100.0, nullptr);
  std::vector<double> tau = p.scale_h.to_double_vector();
  REQUIRE(tau[0] == Approx(10.0).epsilon(1e-14));
  REQUIRE(tau[2] == Approx(100.0).epsilon(1e-14));
  REQUIRE(tau[3] == Approx(100.0).epsilon(1e-14));
  auto cosine_o = [&](const Tensor& q, const Tensor& k) {
    return attention_forward(l2norm_forward(q, 1e-12, L2NormEps::clamp, nullptr),
                             l2norm_forward(k, 1e-12, L2NormEps::clamp, nullptr), in.v, p, nullptr);
  };
  const AttentionOutputs base = cosine_o(in.q, in.k);
  // Scale one q vector and one k vector (positive factors) and compare.
  Tensor q2 = in.q.clone(), k2 = in.k.clone();
  std::vector<double> cs{0.01, 3.0, 250.0};
  for (size_t i = 0; i < cs.size(); ++i) {
    Tensor qv = q2.select(0, 1).select(0, int64_t(5 + i)).select(0, 2);
    std::vector<double> x = qv.to_double_vector();
    for (double& e : x) e *= cs[i];
    qv.copy_(Tensor::from_vector(x, {10}));
    Tensor kv = k2.select(0, 0).select(0, int64_t(3 + 7 * i)).select(0, 1);
    std::vector<double> y = kv.to_double_vector();
    for (double& e : y) e *= cs[i];
    kv.copy_(Tensor::from_vector(y, {10}));
  }
  REQUIRE(rel_error(q2, in.q) > 1e-3);
  const AttentionOutputs scaled = cosine_o(q2, k2);
  REQUIRE(rel_error(scaled.o, base.o) < 1e-14);
  REQUIRE(rel_error(scaled.lse, base.lse) < 1e-14);
  // |s_ij| = tau_h |<q̂_i, k̂_j>| <= tau_h: lse_i is at most tau_h + log(number of visible keys).
  std::vector<double> lse = base.lse.to_double_vector();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 37; ++i) {
        const double L = lse[size_t((b * 4 + h) * 37 + i)];
        REQUIRE(L <= tau[size_t(h)] + std::log(double(i + 1)) + 1e-12);
        REQUIRE(L >= -tau[size_t(h)]);
      }
}

TEST_CASE("attention rejects inputs whose shapes do not fit, naming the op and both shapes", "[attention][cpu]") {
  Tensor q = random_tensor({2, 37, 4, 16}, 191, DType::f32), k = random_tensor({2, 37, 3, 16}, 192, DType::f32),
         v = random_tensor({2, 37, 3, 16}, 193, DType::f32);
  AttentionParams p;
  REQUIRE_THROWS_WITH(attention_forward(q, k, v, p, nullptr),
                      Catch::Contains("attention_forward") && Catch::Contains("(2, 37, 4, 16)") &&
                          Catch::Contains("(2, 37, 3, 16)") && Catch::Contains("multiple of Hkv"));
  Tensor k8 = random_tensor({2, 37, 2, 8}, 194, DType::f32), v8 = random_tensor({2, 37, 2, 8}, 195, DType::f32);
  REQUIRE_THROWS_WITH(attention_forward(q, k8, v8, p, nullptr), Catch::Contains("attention_forward") &&
                                                                     Catch::Contains("(2, 37, 4, 16)") &&
                                                                     Catch::Contains("(2, 37, 2, 8)"));
  Tensor k2 = random_tensor({2, 37, 2, 16}, 196, DType::f32), v_short = random_tensor({2, 30, 2, 16}, 197, DType::f32);
  REQUIRE_THROWS_WITH(attention_forward(q, k2, v_short, p, nullptr),
                      Catch::Contains("(2, 30, 2, 16)") && Catch::Contains("(2, 37, 2, 16)"));
  Tensor k_few = random_tensor({2, 20, 2, 16}, 198, DType::f32), v_few = random_tensor({2, 20, 2, 16}, 199, DType::f32);
  REQUIRE_THROWS_WITH(attention_forward(q, k_few, v_few, p, nullptr), Catch::Contains("Tq = 37 > Tk = 20"));
  AttentionParams bad_window;
  bad_window.window = -1;
  REQUIRE_THROWS_WITH(attention_forward(q, k2, k2, bad_window, nullptr), Catch::Contains("window"));
  AttentionParams bad_scale;
  bad_scale.scale_h = Tensor::full({3}, 0.5);
  REQUIRE_THROWS_WITH(attention_forward(q, k2, k2, bad_scale, nullptr),
                      Catch::Contains("scale_h is (3,)") && Catch::Contains("(2, 37, 4, 16)"));
  Tensor t_last = random_tensor({2, 37, 16, 4}, 200, DType::f32).transpose(2, 3);
  REQUIRE_THROWS_WITH(attention_forward(t_last, k2, k2, p, nullptr), Catch::Contains("last dimension"));
  REQUIRE_THROWS_WITH(attention_forward(q, k2.to(DType::f64), k2, p, nullptr), Catch::Contains("dtype"));
  AttentionSaved s;
  attention_forward(q, k2, k2, p, &s);
  REQUIRE_THROWS_WITH(attention_backward(s, random_tensor({2, 37, 4, 8}, 201, DType::f32), Tensor(), GradMask{7}),
                      Catch::Contains("attention_backward") && Catch::Contains("(2, 37, 4, 16)") &&
                          Catch::Contains("(2, 37, 4, 8)"));
}
