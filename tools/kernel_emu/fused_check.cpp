// The fused bf16 CUDA paths of simple_gla, gated_delta_rule and the gsa forward run in the emulator on
// CPU tensors, output and every gradient against the f64 recurrent CPU references, which see the same
// bf16-rounded inputs (so the error is the kernels' own; the [gpu] tests' 2e-2 is the bar).
//   fused_check selfcheck   simple_gla, whose fused path is proven on the GPU: checks the emulator
//   fused_check gdn         gated_delta_rule, small shapes, strong and weak decays (seconds)
//   fused_check tiles       gated_delta_rule at every compiled tile configuration (minutes)
//   fused_check segments    gated_delta_rule with few heads and many chunks: the segmented scans (minutes)
//   fused_check one:B,T,H,HV,K,V,s0,zero_beta,weak_decay[,beta_hi]
//   fused_check gsa         gsa (o, final memories, lse, every gradient): GQA, T off the chunk, M below
//                           the slot tile, chunks on both sides of the mid-reference guard
//   fused_check nha         the nha forward (o, final memories, joint lse) and the slot side of its
//                           backward (dq, dk of the slots, ds, dg, initial memories; without a bias
//                           at K, V <= 64 also the window kernels' dq, rotated back,
//                           dk and dv (with the slots' dv), and their one-pass sums with the slot side's
//                           gradients): T off the chunk and below the window, GQA, initial
//                           memories, strong decays, windows 1..64, shift apart from the window, RoPE, bias;
//                           the slot gradients read in place equal those on shifted copies
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "core/tensor_math.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"
#include "layers/gsa/gsa_fused.h"
#include "layers/mamba2/simple_gla_op.h"
#include "layers/nha/nha_fused.h"
#include "layers/rope/rope_op.h"
#include "layers/norm/l2norm_op.h"

using namespace hyb;

namespace {

constexpr double kTol = 2e-2;
bool all_ok = true;

Tensor uniform(const Shape& shape, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::f64);
  fill_uniform(t, seed, "test.uniform", lo, hi);
  return t;
}
Tensor as(const Tensor& t, DType d) { return t.defined() ? t.to(d) : Tensor(); }
Tensor rounded(const Tensor& t, DType d) { return t.defined() ? t.to(d).to(DType::f64) : Tensor(); }

void check(const char* what, const Tensor& got, const Tensor& want) {
  if (!want.defined()) return;
  const double e = got.defined() ? rel_error(got.to(DType::f64), want) : std::nan("");
  const bool ok = e < kTol;
  all_ok = all_ok && ok;
  std::printf("  %-6s rel.err %.3e%s\n", what, e, ok ? "" : "  FAIL");
}

struct GdnCase {
  int64_t B, T, H, HV, K, V;
  bool s0, zero_beta, weak_decay;
  double beta_hi = 0.95;  // 1.95: allow_neg_eigval's beta in (0, 2)
};

void run_gdn(const GdnCase& c) {
  std::printf("gated_delta_rule B %ld T %ld H %ld HV %ld K %ld V %ld%s%s g in %s, beta up to %g\n", c.B, c.T, c.H, c.HV,
              c.K, c.V, c.s0 ? " S0" : "", c.zero_beta ? " beta 0 on tokens 40..109" : "",
              c.weak_decay ? "[-0.05, -0.001]" : "[-0.6, -0.02]", c.beta_hi);
  auto unit = [&](uint64_t s) {
    return rounded(l2norm_forward(random_tensor({c.B, c.T, c.H, c.K}, s), 1e-12, L2NormEps::clamp, nullptr),
                   DType::bf16);
  };
  const Tensor q = unit(1), k = unit(2), v = rounded(random_tensor({c.B, c.T, c.HV, c.V}, 3), DType::bf16);
  Tensor beta = uniform({c.B, c.T, c.HV}, 4, 0.05, c.beta_hi);
  if (c.zero_beta && c.T > 40) {
    const int64_t n = std::min<int64_t>(70, c.T - 40);
    beta.narrow(1, 40, n).copy_(Tensor::zeros({c.B, n, c.HV}, DType::f64));
  }
  beta = rounded(beta, DType::f32);
  const Tensor g =
      rounded(c.weak_decay ? uniform({c.B, c.T, c.HV}, 5, -0.05, -0.001) : uniform({c.B, c.T, c.HV}, 5, -0.6, -0.02),
              DType::f32);
  const Tensor S0 = c.s0 ? rounded(random_tensor({c.B, c.HV, c.K, c.V}, 6, DType::f64, 0.5), DType::f32) : Tensor();
  const Tensor dout = rounded(random_tensor({c.B, c.T, c.HV, c.V}, 7), DType::bf16);
  const Tensor dfinal = rounded(random_tensor({c.B, c.HV, c.K, c.V}, 8), DType::f32);
  const GatedDeltaParams p{};
  GatedDeltaSaved rs;
  const GatedDeltaOutputs ref = gated_delta_rule_forward(q, k, v, beta, g, S0, p, &rs);
  const GatedDeltaGrads rg = gated_delta_rule_backward(rs, dout, dfinal, GradMask{63});
  const Tensor qb = as(q, DType::bf16), kb = as(k, DType::bf16), vb = as(v, DType::bf16);
  const Tensor beta32 = as(beta, DType::f32), g32 = as(g, DType::f32), S032 = as(S0, DType::f32);
  const GatedDeltaOutputs got =
      gated_delta_rule_forward_fused(qb, kb, vb, beta32, g32, S032, 1.0 / std::sqrt(double(c.K)), nullptr);
  const GatedDeltaSaved s{qb, kb, vb, beta32, g32, S032, p, {}};
  const GatedDeltaGrads gg =
      gated_delta_rule_backward_fused(s, as(dout, DType::bf16), as(dfinal, DType::f32), GradMask{63});
  check("o", got.o, ref.o);
  check("final", got.final_state, ref.final_state);
  check("dq", gg.dq, rg.dq);
  check("dk", gg.dk, rg.dk);
  check("dv", gg.dv, rg.dv);
  check("dbeta", gg.dbeta, rg.dbeta);
  check("dg", gg.dg, rg.dg);
  check("dS0", gg.dS0, rg.dS0);
  // Partial masks skip outputs (null pointers in the kernels) and, with dS0 alone, the stage 2-3
  // kernel: what is computed must not change.
  const GatedDeltaGrads part =
      gated_delta_rule_backward_fused(s, as(dout, DType::bf16), as(dfinal, DType::f32), GradMask{0b010001});
  const GatedDeltaGrads only_ds0 =
      gated_delta_rule_backward_fused(s, as(dout, DType::bf16), as(dfinal, DType::f32), GradMask{0b100000});
  const bool same = rel_error(part.dq, gg.dq) == 0 && rel_error(part.dg, gg.dg) == 0 && !part.dk.defined() &&
                    !part.dv.defined() && !part.dbeta.defined() && !part.dS0.defined() &&
                    (!S0.defined() || rel_error(only_ds0.dS0, gg.dS0) == 0) && !only_ds0.dq.defined();
  all_ok = all_ok && same;
  std::printf("  partial gradient masks give the same values: %s\n", same ? "yes" : "NO  FAIL");
  // The chunk scratch the forward keeps must be what the backward would rebuild.
  GatedDeltaSaved kept = s;
  gated_delta_rule_forward_fused(qb, kb, vb, beta32, g32, S032, 1.0 / std::sqrt(double(c.K)), &kept.chunks);
  const GatedDeltaGrads gk =
      gated_delta_rule_backward_fused(kept, as(dout, DType::bf16), as(dfinal, DType::f32), GradMask{63});
  const bool same_kept = rel_error(gk.dq, gg.dq) == 0 && rel_error(gk.dk, gg.dk) == 0 &&
                         rel_error(gk.dv, gg.dv) == 0 && rel_error(gk.dbeta, gg.dbeta) == 0 &&
                         rel_error(gk.dg, gg.dg) == 0 && (!S0.defined() || rel_error(gk.dS0, gg.dS0) == 0);
  all_ok = all_ok && same_kept;
  std::printf("  the kept chunk scratch gives the same gradients: %s\n", same_kept ? "yes" : "NO  FAIL");
}

void run_simple_gla(int64_t B, int64_t T, int64_t Gq, int64_t H, int64_t K, int64_t V) {
  std::printf("simple_gla B %ld T %ld Gq %ld H %ld K %ld V %ld\n", B, T, Gq, H, K, V);
  const Tensor q = rounded(random_tensor({B, T, Gq, K}, 11, DType::f64, 0.5), DType::bf16);
  const Tensor k = rounded(random_tensor({B, T, Gq, K}, 12, DType::f64, 0.5), DType::bf16);
  const Tensor v = rounded(random_tensor({B, T, H, V}, 13), DType::bf16);
  const Tensor g = rounded(uniform({B, T, H}, 14, -0.7, -0.01), DType::f32);
  const Tensor S0 = rounded(random_tensor({B, H, K, V}, 15, DType::f64, 0.5), DType::f32);
  const Tensor dout = rounded(random_tensor({B, T, H, V}, 16), DType::bf16);
  const Tensor dfinal = rounded(random_tensor({B, H, K, V}, 17), DType::f32);
  SimpleGlaParams p;
  p.scale = 0.3;
  SimpleGlaSaved rs;
  const SimpleGlaOutputs ref = simple_gla_forward(q, k, v, g, S0, p, &rs);
  const SimpleGlaGrads rg = simple_gla_backward(rs, dout, dfinal, GradMask{31});
  const Tensor qb = as(q, DType::bf16), kb = as(k, DType::bf16), vb = as(v, DType::bf16);
  Tensor kept;
  const SimpleGlaOutputs got = simple_gla_forward_fused(qb, kb, vb, as(g, DType::f32), as(S0, DType::f32), 0.3, &kept);
  SimpleGlaSaved s{qb, kb, vb, as(g, DType::f32), as(S0, DType::f32), p, kept};
  const SimpleGlaGrads gg = simple_gla_backward_fused(s, as(dout, DType::bf16), as(dfinal, DType::f32), GradMask{31});
  check("o", got.o, ref.o);
  check("final", got.final_state, ref.final_state);
  check("dq", gg.dq, rg.dq);
  check("dk", gg.dk, rg.dk);
  check("dv", gg.dv, rg.dv);
  check("dg", gg.dg, rg.dg);
  check("dS0", gg.dS0, rg.dS0);
  s.chunk_states = Tensor();  // the backward computes the states again: the same bits
  const SimpleGlaGrads ga = simple_gla_backward_fused(s, as(dout, DType::bf16), as(dfinal, DType::f32), GradMask{31});
  const bool same = rel_error(ga.dq, gg.dq) == 0 && rel_error(ga.dk, gg.dk) == 0 && rel_error(ga.dv, gg.dv) == 0 &&
                    rel_error(ga.dg, gg.dg) == 0 && rel_error(ga.dS0, gg.dS0) == 0;
  all_ok = all_ok && same;
  std::printf("  the kept chunk states give the same gradients: %s\n", same ? "yes" : "NO  FAIL");
}

// x (B, T, H, D) moved down by `shift` rows along T (zeros in front), or, up, moved back (zeros at the end).
Tensor moved_rows(const Tensor& x, int64_t shift, bool up) {
  const int64_t T = x.size(1);
  Tensor y = Tensor::zeros(x.shape(), x.dtype());
  if (shift < T) y.narrow(1, up ? 0 : shift, T - shift).copy_(x.narrow(1, up ? shift : 0, T - shift));
  return y;
}

// Both undefined, or the same values (bit for bit but the sign of zeros).
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.shape() == b.shape() && a.to_double_vector() == b.to_double_vector());
}

// The window of the joint softmax (nha.md 2): qr, kr (the window side), bias (Hq, nb) or undefined.
struct WindowRef {
  Tensor qr, kr, bias;
  int64_t window = 0, shift = 0;
};

// lse of every row (B, T, Hq) by the recurrence of gsa.md 2.1 in f64: the slot logits z = scale Hk^T q_t
// of the memory after token t - shift and, with a window, the logits of keys t - window < j <= t.
Tensor joint_lse(const Tensor& q, const Tensor& k, const Tensor& s, const Tensor& g, const Tensor& Hk0, double scale,
                 const WindowRef& w = {}) {
  const int64_t B = q.size(0), T = q.size(1), Hq = q.size(2), K = q.size(3), Hkv = k.size(2), M = s.size(3);
  const Tensor qc = q.contiguous(), kc = k.contiguous(), sc = s.contiguous(), gc = g.contiguous();
  const double *qp = qc.data<double>(), *kp = kc.data<double>(), *sp = sc.data<double>(), *gp = gc.data<double>();
  const Tensor qrc = w.window > 0 ? w.qr.contiguous() : Tensor(), krc = w.window > 0 ? w.kr.contiguous() : Tensor();
  const Tensor bc = w.bias.defined() ? w.bias.contiguous() : Tensor();
  Tensor out = Tensor::empty({B, T, Hq}, DType::f64);
  double* op = out.data<double>();
  const Tensor h0 = Hk0.defined() ? Hk0.contiguous() : Tensor();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Hkv; ++j) {
      std::vector<double> H(size_t(K * M), 0.0), z;
      if (h0.defined()) std::copy_n(h0.data<double>() + (b * Hkv + j) * K * M, K * M, H.begin());
      for (int64_t t = 0; t < T; ++t) {
        if (t >= w.shift) {
          const int64_t row = (b * T + t - w.shift) * Hkv + j;
          for (int64_t i = 0; i < K; ++i)
            for (int64_t m = 0; m < M; ++m)
              H[size_t(i * M + m)] = H[size_t(i * M + m)] * std::exp(gp[row * M + m]) + kp[row * K + i] * sp[row * M + m];
        }
        for (int64_t h = j * (Hq / Hkv); h < (j + 1) * (Hq / Hkv); ++h) {
          const double* qt = qp + ((b * T + t) * Hq + h) * K;
          z.clear();
          for (int64_t m = 0; m < M; ++m) {
            double acc = 0.0;
            for (int64_t i = 0; i < K; ++i) acc += H[size_t(i * M + m)] * qt[i];
            z.push_back(scale * acc);
          }
          for (int64_t key = std::max<int64_t>(0, t - w.window + 1); key <= t && w.window > 0; ++key) {
            const double* a = qrc.data<double>() + ((b * T + t) * Hq + h) * K;
            const double* c = krc.data<double>() + ((b * T + key) * Hkv + j) * K;
            double acc = 0.0;
            for (int64_t i = 0; i < K; ++i) acc += a[i] * c[i];
            z.push_back(scale * acc + (bc.defined() ? bc.data<double>()[h * bc.size(1) + t - key] : 0.0));
          }
          const double mx = *std::max_element(z.begin(), z.end());
          double sum = 0.0;
          for (double x : z) sum += std::exp(x - mx);
          op[(b * T + t) * Hq + h] = mx + std::log(sum);
        }
      }
    }
  return out;
}

struct GsaCase {
  int64_t B, T, Hq, Hkv, K, V, M;
  bool states;
  double glo;  // gates uniform in [glo, -0.01]: a chunk's decay range reaches about 64 |glo| / 2
};

void run_gsa(const GsaCase& c) {
  std::printf("gsa B %ld T %ld Hq %ld Hkv %ld K %ld V %ld M %ld%s g in [%g, -0.01]\n", c.B, c.T, c.Hq, c.Hkv, c.K, c.V,
              c.M, c.states ? " states" : "", c.glo);
  const Tensor q = rounded(random_tensor({c.B, c.T, c.Hq, c.K}, 21, DType::f64, 0.5), DType::bf16);
  const Tensor k = rounded(random_tensor({c.B, c.T, c.Hkv, c.K}, 22, DType::f64, 0.5), DType::bf16);
  const Tensor v = rounded(random_tensor({c.B, c.T, c.Hkv, c.V}, 23), DType::bf16);
  const Tensor s = rounded(uniform({c.B, c.T, c.Hkv, c.M}, 24, 0.0, 1.0), DType::f32);
  const Tensor g = rounded(uniform({c.B, c.T, c.Hkv, c.M}, 25, c.glo, -0.01), DType::f32);
  const Tensor Hk0 = c.states ? rounded(random_tensor({c.B, c.Hkv, c.K, c.M}, 26, DType::f64, 0.5), DType::f32) : Tensor();
  const Tensor Hv0 = c.states ? rounded(random_tensor({c.B, c.Hkv, c.M, c.V}, 27, DType::f64, 0.5), DType::f32) : Tensor();
  const double scale = 0.4;
  const GsaOutputs ref = gsa_forward_cpu(q, k, v, s, g, Hk0, Hv0, scale);
  const GsaFusedOut got = gsa_forward_fused(as(q, DType::bf16), as(k, DType::bf16), as(v, DType::bf16),
                                            as(s, DType::f32), as(g, DType::f32), as(Hk0, DType::f32),
                                            as(Hv0, DType::f32), scale);
  check("o", got.o, ref.o);
  check("Hk", got.Hk, ref.Hk);
  check("Hv", got.Hv, ref.Hv);
  check("lse", got.lse, joint_lse(q, k, s, g, Hk0, scale));
  const Tensor dout = rounded(random_tensor({c.B, c.T, c.Hq, c.V}, 28), DType::bf16);
  const Tensor dHk = rounded(random_tensor({c.B, c.Hkv, c.K, c.M}, 29, DType::f64, 0.5), DType::f32);
  const Tensor dHv = rounded(random_tensor({c.B, c.Hkv, c.M, c.V}, 30, DType::f64, 0.5), DType::f32);
  GsaParams p;
  p.scale = scale;
  const GsaSaved rs{q, k, v, s, g, Hk0, Hv0, p, Tensor()};
  const GsaGrads rg = gsa_backward_cpu(rs, dout, dHk, dHv, GradMask{127});
  const GsaSaved fs{as(q, DType::bf16), as(k, DType::bf16), as(v, DType::bf16), as(s, DType::f32), as(g, DType::f32),
                    as(Hk0, DType::f32), as(Hv0, DType::f32), p, got.lse};
  const GsaGrads fg = gsa_backward_fused(fs, as(dout, DType::bf16), as(dHk, DType::f32), as(dHv, DType::f32),
                                         GradMask{127});
  check("dq", fg.dq, rg.dq);
  check("dk", fg.dk, rg.dk);
  check("dv", fg.dv, rg.dv);
  check("ds", fg.ds, rg.ds);
  check("dg", fg.dg, rg.dg);
  check("dHk0", fg.dHk0, rg.dHk0);
  check("dHv0", fg.dHv0, rg.dHv0);
  // The chunk memories the forward keeps (save_chunk_states) must be what B0 would rebuild.
  const GsaFusedOut kept = gsa_forward_fused(as(q, DType::bf16), as(k, DType::bf16), as(v, DType::bf16),
                                             as(s, DType::f32), as(g, DType::f32), as(Hk0, DType::f32),
                                             as(Hv0, DType::f32), scale, true);
  GsaSaved ks = fs;
  ks.chunk_Hk = kept.chunk_Hk, ks.chunk_Hv = kept.chunk_Hv, ks.chunk_decay = kept.chunk_decay;
  const GsaGrads kg = gsa_backward_fused(ks, as(dout, DType::bf16), as(dHk, DType::f32), as(dHv, DType::f32),
                                         GradMask{127});
  const bool same_kept = rel_error(kg.dq, fg.dq) == 0 && rel_error(kg.dk, fg.dk) == 0 && rel_error(kg.dv, fg.dv) == 0 &&
                         rel_error(kg.ds, fg.ds) == 0 && rel_error(kg.dg, fg.dg) == 0 &&
                         (!Hk0.defined() || (rel_error(kg.dHk0, fg.dHk0) == 0 && rel_error(kg.dHv0, fg.dHv0) == 0));
  all_ok = all_ok && same_kept;
  std::printf("  the kept chunk memories give the same gradients: %s\n", same_kept ? "yes" : "NO  FAIL");
}

struct NhaCase {
  int64_t B, T, Hq, Hkv, K, V, M, window, shift;
  bool states, bias, rope;
  double glo;  // gates uniform in [glo, -0.01]
};

void run_nha(const NhaCase& c) {
  std::printf("nha B %ld T %ld Hq %ld Hkv %ld K %ld V %ld M %ld window %ld shift %ld%s%s%s g in [%g, -0.01]\n", c.B,
              c.T, c.Hq, c.Hkv, c.K, c.V, c.M, c.window, c.shift, c.states ? " states" : "", c.bias ? " bias" : "",
              c.rope ? " rope" : "", c.glo);
  const Tensor q = rounded(random_tensor({c.B, c.T, c.Hq, c.K}, 41, DType::f64, 0.5), DType::bf16);
  const Tensor k = rounded(random_tensor({c.B, c.T, c.Hkv, c.K}, 42, DType::f64, 0.5), DType::bf16);
  const RopeTable tab = rope_table(NhaParams{}.rope_theta, c.K, c.T, std::nullopt, Device::cpu());
  const Tensor v = rounded(random_tensor({c.B, c.T, c.Hkv, c.V}, 43), DType::bf16);
  const Tensor s = rounded(uniform({c.B, c.T, c.Hkv, c.M}, 44, 0.0, 1.0), DType::f32);
  const Tensor g = rounded(uniform({c.B, c.T, c.Hkv, c.M}, 45, c.glo, -0.01), DType::f32);
  const Tensor Hk0 = c.states ? rounded(random_tensor({c.B, c.Hkv, c.K, c.M}, 46, DType::f64, 0.5), DType::f32) : Tensor();
  const Tensor Hv0 = c.states ? rounded(random_tensor({c.B, c.Hkv, c.M, c.V}, 47, DType::f64, 0.5), DType::f32) : Tensor();
  const Tensor bias = c.bias ? rounded(uniform({c.Hq, c.window + 3}, 48, -1.0, 1.0), DType::bf16) : Tensor();
  NhaParams p;
  p.scale = 0.4;
  p.window = c.window, p.shift = c.shift, p.rope = c.rope;
  const NhaOutputs ref = nha_forward_cpu(q, k, v, s, g, Hk0, Hv0, bias, p);
  const int64_t window = std::min(c.window, c.T), shift = std::min(c.shift, c.T);
  Tensor qr = q, kr = k;
  if (c.rope) qr = rope_forward(q, tab, 0), kr = rope_forward(k, tab, 0);
  SlotAttentionArgs a;
  a.q = as(q, DType::bf16), a.k = as(k, DType::bf16), a.v = as(v, DType::bf16);
  a.s = as(s, DType::f32), a.g = as(g, DType::f32), a.HK0 = as(Hk0, DType::f32), a.HV0 = as(Hv0, DType::f32);
  a.qr = as(qr, DType::bf16), a.kr = as(kr, DType::bf16), a.bias = as(bias, DType::bf16);
  a.scale = *p.scale, a.window = window, a.shift = shift;
  const NhaFusedOut got = nha_forward_fused(a, true);
  check("o", got.o, ref.o);
  check("HK", got.HK, ref.HK);
  check("HV", got.HV, ref.HV);
  check("lse", got.lse, joint_lse(q, k, s, g, Hk0, *p.scale, {qr, kr, bias, window, shift}));
  // The reference with the window's q, k apart gives the slots' dq, dk on their own.
  const Tensor dout = rounded(random_tensor({c.B, c.T, c.Hq, c.V}, 49), DType::bf16);
  const Tensor dHK = rounded(random_tensor({c.B, c.Hkv, c.K, c.M}, 50, DType::f64, 0.5), DType::f32);
  const Tensor dHV = rounded(random_tensor({c.B, c.Hkv, c.M, c.V}, 51, DType::f64, 0.5), DType::f32);
  const NhaSaved rs{q, k, v, s, g, Hk0, Hv0, bias, q, k, p, Tensor(), Tensor()};
  const NhaGrads rg = nha_backward_cpu(rs, dout, dHK, dHV, GradMask{1023});
  const NhaSlotGrads ng = nha_slot_backward_fused(a, got.lse, got.o, as(dout, DType::bf16), as(dHK, DType::f32),
                                                  as(dHV, DType::f32), NhaSaved{});
  const GsaGrads& fg = ng.slot;
  NhaSaved kept{};
  kept.chunk_HK = got.chunk_HK, kept.chunk_HV = got.chunk_HV, kept.chunk_decay = got.chunk_decay;
  const GsaGrads kg = nha_slot_backward_fused(a, got.lse, got.o, as(dout, DType::bf16), as(dHK, DType::f32),
                                              as(dHV, DType::f32), kept).slot;
  const bool same_kept = same_values(fg.dq, kg.dq) && same_values(fg.dk, kg.dk) && same_values(fg.dv, kg.dv) &&
                         same_values(fg.ds, kg.ds) && same_values(fg.dg, kg.dg) &&
                         same_values(fg.dHk0, kg.dHk0) && same_values(fg.dHv0, kg.dHv0);
  all_ok = all_ok && same_kept;
  std::printf("  the kept chunk memories give the same slot gradients: %s\n", same_kept ? "yes" : "NO  FAIL");
  if (nha_window_fused(a)) {
    // The window kernels: dqr query-major; dkr, and dv with the slot side's part added, key-major.
    const SlotAttentionGrads wk = nha_window_grads_fused(a, got.lse, ng.delta, as(dout, DType::bf16));
    const Tensor dqr = as(wk.dqr, DType::f64);
    check("dq window", c.rope ? rope_backward(dqr, tab, 0) : dqr, rg.dq_window);
    const Tensor dkr = as(wk.dkr, DType::f64);
    check("dk window", c.rope ? rope_backward(dkr, tab, 0) : dkr, rg.dk_window);
    Tensor dv = as(fg.dv, DType::f64).clone();
    add_(dv, as(wk.dv, DType::f64));
    check("dv", dv, rg.dv);
    // The one-pass sums the op returns when the window shares q and k with the slots.
    Tensor dq = rg.dq.clone(), dk = rg.dk.clone();
    add_(dq, rg.dq_window);
    add_(dk, rg.dk_window);
    const RopeTable* rope = c.rope ? &tab : nullptr;
    check("dq sum", nha_add_window_grad(fg.dq, wk.dqr, rope, 0), dq);
    check("dk sum", nha_add_window_grad(fg.dk, wk.dkr, rope, 0), dk);
    check("dv sum", nha_add_window_grad(fg.dv, wk.dv, nullptr, 0), rg.dv);
    // The same sums formed inside the window kernels.
    if (nha_window_sum_fused_ok(a, rope)) {
      const NhaWindowSum ws = nha_window_sum_fused(a, got.lse, ng.delta, as(dout, DType::bf16), fg, rope, 0);
      check("dq one pass", ws.dq, dq);
      check("dk one pass", ws.dk, dk);
      check("dv one pass", ws.dv, rg.dv);
    }
  }
  check("dq", fg.dq, rg.dq);
  check("dk", fg.dk, rg.dk);
  check("ds", fg.ds, rg.ds);
  check("dg", fg.dg, rg.dg);
  check("dHK0", fg.dHk0, rg.dHK0);
  check("dHV0", fg.dHv0, rg.dHV0);
  // The kernels read the shifted stream in place: the slot backward on copies of k, v, s, g moved down by
  // the shift (and shift 0), its dk, dv, ds, dg moved back up, must give the same values (dv included,
  // which the reference above does not isolate).
  SlotAttentionArgs copied = a;
  copied.k = moved_rows(a.k, shift, false), copied.v = moved_rows(a.v, shift, false);
  copied.s = moved_rows(a.s, shift, false), copied.g = moved_rows(a.g, shift, false), copied.shift = 0;
  const GsaGrads cg = nha_slot_backward_fused(copied, got.lse, got.o, as(dout, DType::bf16), as(dHK, DType::f32),
                                              as(dHV, DType::f32), NhaSaved{}).slot;
  const bool same = same_values(fg.dq, cg.dq) && same_values(fg.dk, moved_rows(cg.dk, shift, true)) &&
                    same_values(fg.dv, moved_rows(cg.dv, shift, true)) &&
                    same_values(fg.ds, moved_rows(cg.ds, shift, true)) &&
                    same_values(fg.dg, moved_rows(cg.dg, shift, true)) && same_values(fg.dHk0, cg.dHk0) &&
                    same_values(fg.dHv0, cg.dHv0);
  all_ok = all_ok && same;
  std::printf("  in place and on shifted copies: the same slot gradients: %s\n", same ? "yes" : "NO  FAIL");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "gdn";
  if (what == "selfcheck") {
    run_simple_gla(1, 97, 1, 2, 64, 64);
    run_simple_gla(2, 70, 2, 4, 32, 16);
  } else if (what == "gdn") {
    for (bool weak : {false, true})
      for (const GdnCase& c :
           {GdnCase{1, 37, 2, 2, 16, 16, false, false, weak}, GdnCase{2, 130, 1, 2, 32, 40, true, false, weak},
            GdnCase{1, 64, 1, 1, 64, 64, true, false, weak}, GdnCase{1, 150, 2, 2, 16, 16, true, true, weak},
            GdnCase{1, 1, 1, 2, 8, 8, true, false, weak}, GdnCase{2, 63, 2, 4, 32, 24, true, false, weak},
            GdnCase{1, 65, 2, 2, 24, 72, true, false, weak}, GdnCase{1, 70, 1, 1, 128, 256, true, false, weak},
            GdnCase{1, 97, 2, 4, 128, 40, false, false, weak}, GdnCase{2, 130, 2, 4, 16, 16, true, false, weak, 1.95},
            GdnCase{1, 130, 1, 1, 64, 64, true, false, weak, 1.95}})
        run_gdn(c);
  } else if (what == "tiles") {  // scan_plan takes column tiles of 32, 64 and 128 only with many blocks
    for (const GdnCase& c :
         {GdnCase{1, 65, 66, 66, 32, 64, true, false, true}, GdnCase{2, 65, 66, 66, 24, 64, false, false, true},
          GdnCase{3, 65, 66, 66, 32, 64, true, false, true}, GdnCase{1, 70, 33, 66, 128, 40, true, false, true},
          GdnCase{1, 70, 33, 33, 128, 256, true, false, true}, GdnCase{1, 130, 48, 48, 128, 256, true, false, true}})
      run_gdn(c);
  } else if (what == "segments") {  // few (b, value head) pairs, many chunks: segmented scans (scan_plan)
    for (const GdnCase& c :
         {GdnCase{1, 1317, 2, 2, 64, 64, true, false, true}, GdnCase{2, 1600, 1, 1, 32, 16, true, false, true},
          GdnCase{1, 1600, 1, 2, 32, 24, false, false, false}, GdnCase{1, 1100, 1, 1, 128, 256, true, false, true}})
      run_gdn(c);
  } else if (what == "gsa") {
    for (const GsaCase& c : {GsaCase{2, 37, 4, 2, 16, 16, 8, false, -0.9}, GsaCase{1, 1, 2, 1, 8, 8, 4, true, -0.9},
                             GsaCase{1, 65, 2, 2, 64, 64, 64, true, -0.9}, GsaCase{1, 130, 2, 1, 24, 40, 32, true, -1.6},
                             GsaCase{1, 100, 2, 2, 72, 24, 16, true, -10.0}, GsaCase{1, 70, 2, 2, 128, 128, 64, true, -4.0},
                             GsaCase{1, 129, 3, 1, 64, 128, 5, false, -0.3}, GsaCase{2, 200, 8, 2, 128, 64, 1, true, -0.9},
                             GsaCase{1, 190, 4, 2, 40, 16, 48, true, -1.7}})
      run_gsa(c);
  } else if (what == "nha") {
    for (const NhaCase& c : {NhaCase{2, 37, 4, 2, 16, 16, 8, 32, 32, false, true, true, -0.9},
                             NhaCase{1, 20, 2, 1, 8, 8, 4, 32, 32, true, false, true, -0.9},
                             NhaCase{1, 130, 2, 2, 64, 64, 32, 32, 32, true, true, true, -1.6},
                             NhaCase{1, 150, 4, 2, 64, 64, 64, 64, 64, true, true, true, -10.0},
                             NhaCase{1, 100, 2, 1, 24, 40, 16, 17, 5, true, false, true, -4.0},
                             NhaCase{1, 70, 2, 2, 32, 32, 8, 1, 0, false, true, false, -0.3},
                             NhaCase{1, 129, 2, 1, 128, 64, 64, 32, 32, true, true, true, -0.9},
                             NhaCase{1, 64, 2, 2, 16, 16, 5, 64, 100, true, false, true, -0.9},
                             NhaCase{1, 130, 2, 2, 64, 64, 32, 32, 32, true, false, true, -1.6},
                             NhaCase{1, 150, 4, 2, 64, 48, 64, 64, 64, false, false, true, -10.0},
                             NhaCase{2, 70, 2, 1, 32, 64, 8, 1, 0, true, false, false, -0.3}})
      run_nha(c);
  } else if (what.rfind("one:", 0) == 0) {
    GdnCase c{};
    int s0 = 0, zb = 0, weak = 0;
    if (std::sscanf(what.c_str() + 4, "%ld,%ld,%ld,%ld,%ld,%ld,%d,%d,%d,%lf", &c.B, &c.T, &c.H, &c.HV, &c.K, &c.V, &s0,
                    &zb, &weak, &c.beta_hi) < 9) {
      std::fprintf(stderr, "fused_check: one:B,T,H,HV,K,V,s0,zero_beta,weak_decay[,beta_hi]\n");
      return 2;
    }
    c.s0 = s0, c.zero_beta = zb, c.weak_decay = weak;
    run_gdn(c);
  } else {
    std::fprintf(stderr,
                 "fused_check: selfcheck | gdn | tiles | segments | gsa | nha | "
                 "one:B,T,H,HV,K,V,s0,zero_beta,weak_decay[,beta_hi]\n");
    return 2;
  }
  std::printf(all_ok ? "all within %g\n" : "FAILED (tolerance %g)\n", kTol);
  return all_ok ? 0 : 1;
}
