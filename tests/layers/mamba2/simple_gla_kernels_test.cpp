// The CUDA path of simple_gla is a sequence of chunk-toolkit primitives (simple_gla_kernels.cpp); on
// CPU tensors the toolkit runs loop twins of its kernels, so this test checks the sequence itself
// (views, strides, transposes, masks, scans, group sums) against the f64 recurrent reference, in f32
// (the toolkit's scratch is f32): outputs, final state and every gradient, T around the 64-token chunk.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/mamba2/simple_gla_op.h"
#include "layers/op_test_util.h"

using namespace hyb;

TEST_CASE("the simple_gla kernel sequence run on the cpu equals the recurrent reference", "[simple_gla][cpu]") {
  struct Case {
    int64_t B, T, Gq, H, K, V;
    bool s0;
  };
  for (const Case& c : {Case{2, 37, 2, 2, 16, 24, true}, Case{1, 1, 1, 3, 8, 5, true}, Case{1, 63, 1, 2, 33, 70, false},
                        Case{1, 64, 2, 4, 64, 64, true}, Case{1, 65, 2, 4, 20, 65, true}, Case{1, 130, 1, 3, 70, 40, true}, Case{1, 133, 2, 2, 16, 8, true},
                        Case{1, 70, 1, 2, 256, 192, true}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " Gq " << c.Gq << " H " << c.H << " K " << c.K << " V " << c.V
                         << (c.s0 ? " S0" : "")) {
      Tensor q = random_tensor({c.B, c.T, c.Gq, c.K}, 1, DType::f64, 0.5), k = random_tensor({c.B, c.T, c.Gq, c.K}, 2, DType::f64, 0.5);
      Tensor v = random_tensor({c.B, c.T, c.H, c.V}, 3), g = Tensor::empty({c.B, c.T, c.H}, DType::f64);
      fill_uniform(g, 4, "test.g", -0.7, -0.01);
      Tensor S0 = c.s0 ? random_tensor({c.B, c.H, c.K, c.V}, 5, DType::f64, 0.5) : Tensor();
      Tensor dout = random_tensor({c.B, c.T, c.H, c.V}, 6), dfinal = random_tensor({c.B, c.H, c.K, c.V}, 7);
      SimpleGlaParams p;
      p.scale = 0.3;
      SimpleGlaSaved ref_s;
      const SimpleGlaOutputs ref = simple_gla_forward(q, k, v, g, S0, p, &ref_s);
      const SimpleGlaGrads ref_g = simple_gla_backward(ref_s, dout, dfinal, GradMask{31});

      const SimpleGlaOutputs got = simple_gla_forward_kernels(to_f32(q), to_f32(k), to_f32(v), to_f32(g), to_f32(S0), 0.3);
      const SimpleGlaSaved s{to_f32(q), to_f32(k), to_f32(v), to_f32(g), to_f32(S0), p};
      const SimpleGlaGrads got_g = simple_gla_backward_kernels(s, to_f32(dout), to_f32(dfinal), GradMask{31});
      check_state_op_close(got, got_g, ref, ref_g, 2e-5);
    }
  }
}
