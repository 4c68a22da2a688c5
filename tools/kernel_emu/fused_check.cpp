// The fused bf16 CUDA paths of simple_gla and gated_delta_rule run in the emulator on CPU tensors,
// output and every gradient against the f64 recurrent CPU references, which see the same
// bf16-rounded inputs (so the error is the kernels' own; the [gpu] tests' 2e-2 is the bar).
//   fused_check selfcheck   simple_gla, whose fused path is proven on the GPU: checks the emulator
//   fused_check gdn         gated_delta_rule, small shapes, strong and weak decays (seconds)
//   fused_check tiles       gated_delta_rule at every compiled tile configuration (minutes)
//   fused_check segments    gated_delta_rule with few heads and many chunks: the segmented scans (minutes)
//   fused_check one:B,T,H,HV,K,V,s0,zero_beta,weak_decay[,beta_hi]
#include <cmath>
#include <cstdio>
#include <string>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"
#include "layers/mamba2/simple_gla_op.h"
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
      gated_delta_rule_forward_fused(qb, kb, vb, beta32, g32, S032, 1.0 / std::sqrt(double(c.K)));
  const GatedDeltaSaved s{qb, kb, vb, beta32, g32, S032, p};
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
  const SimpleGlaOutputs got = simple_gla_forward_fused(qb, kb, vb, as(g, DType::f32), as(S0, DType::f32), 0.3);
  const SimpleGlaSaved s{qb, kb, vb, as(g, DType::f32), as(S0, DType::f32), p};
  const SimpleGlaGrads gg = simple_gla_backward_fused(s, as(dout, DType::bf16), as(dfinal, DType::f32), GradMask{31});
  check("o", got.o, ref.o);
  check("final", got.final_state, ref.final_state);
  check("dq", gg.dq, rg.dq);
  check("dk", gg.dk, rg.dk);
  check("dv", gg.dv, rg.dv);
  check("dg", gg.dg, rg.dg);
  check("dS0", gg.dS0, rg.dS0);
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
  } else if (what == "tiles") {  // scan_plan takes column tiles of 32 and 64 only with many blocks
    for (const GdnCase& c :
         {GdnCase{1, 65, 66, 66, 32, 64, true, false, true}, GdnCase{2, 65, 66, 66, 24, 64, false, false, true},
          GdnCase{3, 65, 66, 66, 32, 64, true, false, true}, GdnCase{1, 70, 33, 66, 128, 40, true, false, true},
          GdnCase{1, 70, 33, 33, 128, 256, true, false, true}})
      run_gdn(c);
  } else if (what == "segments") {  // few (b, value head) pairs, many chunks: segmented scans (scan_plan)
    for (const GdnCase& c :
         {GdnCase{1, 1317, 2, 2, 64, 64, true, false, true}, GdnCase{2, 1600, 1, 1, 32, 16, true, false, true},
          GdnCase{1, 1600, 1, 2, 32, 24, false, false, false}, GdnCase{1, 1100, 1, 1, 128, 256, true, false, true}})
      run_gdn(c);
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
    std::fprintf(
        stderr,
        "fused_check: selfcheck | gdn | tiles | segments | one:B,T,H,HV,K,V,s0,zero_beta,weak_decay[,beta_hi]\n");
    return 2;
  }
  std::printf(all_ok ? "all within %g\n" : "FAILED (tolerance %g)\n", kTol);
  return all_ok ? 0 : 1;
}
