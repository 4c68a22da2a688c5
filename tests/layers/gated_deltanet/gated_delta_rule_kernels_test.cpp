// The CUDA path of the gated delta rule is a sequence of chunk-toolkit primitives
// (gated_delta_rule_kernels.cpp); on CPU tensors the toolkit runs loop twins of its kernels, so this
// test checks the sequence itself (views, strides, masks, the WY solve, the host loops over chunks,
// group sums) against the f64 recurrent reference, in f32 (the toolkit's scratch is f32): outputs,
// final state and every gradient, T around the 64-token chunk, HV = H and 2H, beta = 0 stretches.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"
#include "layers/norm/l2norm_op.h"

using namespace hyb;

TEST_CASE("the gated_delta_rule kernel sequence run on the cpu equals the recurrent reference",
          "[gated_delta_rule][cpu]") {
  struct Case {
    int64_t B, T, H, HV, K, V;
    bool s0, zero_beta;
  };
  for (const Case& c : {Case{2, 37, 2, 2, 16, 16, false, false}, Case{1, 1, 1, 2, 8, 5, true, false},
                        Case{1, 63, 2, 4, 32, 24, true, false}, Case{1, 64, 1, 1, 64, 64, true, false},
                        Case{1, 65, 2, 2, 20, 70, true, false}, Case{1, 133, 1, 2, 70, 40, false, false},
                        Case{1, 150, 2, 2, 16, 16, true, true}, Case{1, 70, 1, 2, 256, 256, true, false}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " H " << c.H << " HV " << c.HV << " K " << c.K << " V " << c.V
                         << (c.s0 ? " S0" : "") << (c.zero_beta ? " beta 0 on tokens 40..109" : "")) {
      auto unit = [&](uint64_t s) {
        return l2norm_forward(random_tensor({c.B, c.T, c.H, c.K}, s), 1e-12, L2NormEps::clamp, nullptr);
      };
      auto uniform = [&](uint64_t seed, double lo, double hi) {
        Tensor t = Tensor::empty({c.B, c.T, c.HV}, DType::f64);
        fill_uniform(t, seed, "test.uniform", lo, hi);
        return t;
      };
      Tensor q = unit(1), k = unit(2), v = random_tensor({c.B, c.T, c.HV, c.V}, 3);
      Tensor beta = uniform(4, 0.05, 0.95), g = uniform(5, -0.6, -0.02);
      if (c.zero_beta) beta.narrow(1, 40, 70).copy_(Tensor::zeros({c.B, 70, c.HV}, DType::f64));
      Tensor S0 = c.s0 ? random_tensor({c.B, c.HV, c.K, c.V}, 6, DType::f64, 0.5) : Tensor();
      Tensor dout = random_tensor({c.B, c.T, c.HV, c.V}, 7), dfinal = random_tensor({c.B, c.HV, c.K, c.V}, 8);
      const GatedDeltaParams p{};
      GatedDeltaSaved ref_s;
      const GatedDeltaOutputs ref = gated_delta_rule_forward(q, k, v, beta, g, S0, p, &ref_s);
      const GatedDeltaGrads ref_g = gated_delta_rule_backward(ref_s, dout, dfinal, GradMask{63});

      auto f32 = [](const Tensor& t) { return t.defined() ? t.to(DType::f32) : Tensor(); };
      const double scale = 1.0 / std::sqrt(double(c.K));
      const GatedDeltaOutputs got =
          gated_delta_rule_forward_kernels(f32(q), f32(k), f32(v), f32(beta), f32(g), f32(S0), scale);
      const GatedDeltaSaved s{f32(q), f32(k), f32(v), f32(beta), f32(g), f32(S0), p};
      const GatedDeltaGrads got_g = gated_delta_rule_backward_kernels(s, f32(dout), f32(dfinal), GradMask{63});
      auto check = [](const char* what, const Tensor& x, const Tensor& want) {
        INFO(what);
        REQUIRE(x.defined() == want.defined());
        if (want.defined()) CHECK(rel_error(x.to(DType::f64), want) < 2e-5);
      };
      check("o", got.o, ref.o);
      check("final_state", got.final_state, ref.final_state);
      check("dq", got_g.dq, ref_g.dq);
      check("dk", got_g.dk, ref_g.dk);
      check("dv", got_g.dv, ref_g.dv);
      check("dbeta", got_g.dbeta, ref_g.dbeta);
      check("dg", got_g.dg, ref_g.dg);
      check("dS0", got_g.dS0, ref_g.dS0);
    }
  }
}
