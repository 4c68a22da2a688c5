// The per-head decay on CUDA against the f64 CPU reference: dt, g and the gradients of x, dt_bias
// and A_log, without the clamp (f32 and bf16) and with it (f32 only: a bf16-rounded input can move a
// value across a clamp edge, where the gradient jumps to 0).
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "layers/ssm_decay/ssm_decay_op.h"
#include "parity.h"

using namespace hyb;

TEST_CASE("ssm_decay on cuda matches the cpu reference, dt, g and all gradients", "[ssm_decay][gpu]") {
  // (B, T, H): 4515 elements take the scalar kernel; 444 with H 6 packs in f32 only, a pack spanning
  // two rows; 2400 with H 12 packs in both; 1.28M elements make the f32 grid stride loop twice.
  struct Case {
    int64_t B, T, H;
  };
  for (const Case& c : {Case{3, 301, 5}, Case{2, 37, 6}, Case{4, 50, 12}, Case{4, 20000, 16}}) {
    for (bool clamp : {false, true}) {
      DYNAMIC_SECTION((clamp ? "clamp [0.4, 1.5]" : "no clamp") << " B " << c.B << " T " << c.T << " H " << c.H) {
        ParityOptions opt;
        opt.bf16 = !clamp;
        // x spread so that some x + dt_bias pass the softplus threshold 20.
        auto r = cuda_parity(
            [&](const std::vector<Var>& x) {
              SsmDecayVars d = ssm_decay(x[0], x[1], x[2], clamp ? 0.4 : 0.0, clamp ? 1.5 : INFINITY);
              return std::vector<Var>{d.dt, d.g};
            },
            {random_tensor({c.B, c.T, c.H}, 1, DType::f64, clamp ? 1.0 : 8.0), random_tensor({c.H}, 2),
             random_tensor({c.H}, 3, DType::f64, 0.5)},
            opt);
        INFO(r.report);
        REQUIRE(r.ok);
      }
    }
  }
}
