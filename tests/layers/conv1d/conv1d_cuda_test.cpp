// The causal depthwise conv + SiLU on CUDA against the f64 CPU reference: output and every gradient
// (x, w, bias, the cache x0), with and without bias and cache, at odd channel counts, T shorter than
// the window (a decode step) and longer.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/conv1d/conv1d_op.h"
#include "parity.h"

using namespace hyb;

TEST_CASE("causal_conv1d_silu on cuda matches the cpu reference, output and every gradient", "[conv1d][gpu]") {
  struct Case {
    int64_t B, T, C, W;
    bool bias, cache;
  };
  // Odd C takes the scalar streaming kernel; C a multiple of 8 the packed one (4 for f32 only: 100, 60);
  // T = 50 ends in a partial run of 16 steps; T 8200 with B 2 makes more runs than the backward's
  // 256 x 4 threads along time, so a thread sums several runs into its dw partial; W 6 takes the
  // kernels for any width.
  for (const Case& c : {Case{2, 37, 67, 4, true, false}, Case{3, 1, 130, 4, true, true}, Case{1, 2, 33, 4, false, true},
                        Case{2, 259, 100, 4, false, false}, Case{2, 19, 45, 3, true, true}, Case{2, 37, 64, 4, true, true},
                        Case{3, 50, 136, 4, false, false}, Case{2, 1, 64, 4, true, true}, Case{1, 2, 32, 4, true, true},
                        Case{2, 33, 24, 2, true, true}, Case{1, 17, 40, 3, false, true}, Case{2, 21, 60, 4, true, false},
                        Case{2, 8200, 8, 4, true, true}, Case{2, 21, 16, 6, true, true}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " C " << c.C << " W " << c.W << (c.bias ? " bias" : "")
                         << (c.cache ? " cache" : "")) {
      std::vector<Tensor> in{random_tensor({c.B, c.T, c.C}, 1), random_tensor({c.C, c.W}, 2, DType::f64, 0.5)};
      if (c.bias) in.push_back(random_tensor({c.C}, 3, DType::f64, 0.3));
      if (c.cache) in.push_back(random_tensor({c.B, c.W - 1, c.C}, 4));
      auto r = cuda_parity(
          [&](const std::vector<Var>& x) {
            const Var bias = c.bias ? x[2] : Var();
            const Var x0 = c.cache ? x[c.bias ? 3 : 2] : Var();
            return std::vector<Var>{causal_conv1d_silu(x[0], x[1], bias, x0)};
          },
          in);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}
