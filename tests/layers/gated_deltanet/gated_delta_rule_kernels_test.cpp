// The CUDA path of the gated delta rule is a sequence of chunk-toolkit primitives
// (gated_delta_rule_kernels.cpp); on CPU tensors the toolkit runs loop twins of its kernels, so this
// test checks the sequence itself (views, strides, masks, the WY solve, the host loops over chunks,
// group sums) against the f64 recurrent reference, in f32 (the toolkit's scratch is f32): outputs,
// final state and every gradient, T around the 64-token chunk, HV = H and 2H, beta = 0 stretches.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"
#include "layers/norm/l2norm_op.h"
#include "layers/op_test_util.h"

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
      Tensor q = unit(1), k = unit(2), v = random_tensor({c.B, c.T, c.HV, c.V}, 3);
      Tensor beta = uniform_tensor({c.B, c.T, c.HV}, 4, 0.05, 0.95), g = uniform_tensor({c.B, c.T, c.HV}, 5, -0.6, -0.02);
      if (c.zero_beta) beta.narrow(1, 40, 70).copy_(Tensor::zeros({c.B, 70, c.HV}, DType::f64));
      Tensor S0 = c.s0 ? random_tensor({c.B, c.HV, c.K, c.V}, 6, DType::f64, 0.5) : Tensor();
      Tensor dout = random_tensor({c.B, c.T, c.HV, c.V}, 7), dfinal = random_tensor({c.B, c.HV, c.K, c.V}, 8);
      const GatedDeltaParams p{};
      GatedDeltaSaved ref_s;
      const GatedDeltaOutputs ref = gated_delta_rule_forward(q, k, v, beta, g, S0, p, &ref_s);
      const GatedDeltaGrads ref_g = gated_delta_rule_backward(ref_s, dout, dfinal, GradMask{63});

      const double scale = 1.0 / std::sqrt(double(c.K));
      const GatedDeltaOutputs got =
          gated_delta_rule_forward_kernels(to_f32(q), to_f32(k), to_f32(v), to_f32(beta), to_f32(g), to_f32(S0), scale);
      const GatedDeltaSaved s{to_f32(q), to_f32(k), to_f32(v), to_f32(beta), to_f32(g), to_f32(S0), p, {}};
      const GatedDeltaGrads got_g = gated_delta_rule_backward_kernels(s, to_f32(dout), to_f32(dfinal), GradMask{63});
      check_state_op_close(got, got_g, ref, ref_g, 2e-5);
      check_close_if_defined("dbeta", got_g.dbeta, ref_g.dbeta, 2e-5);
    }
  }
}
