// The gated RMSNorm on CUDA against the f64 CPU reference, both orders: output and the gradients of
// x, z and the gain, with a gain per group (Mamba2's (G, Gs)) or shared by all groups (GDN's (Gs,)).
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/norm/gated_rmsnorm_op.h"
#include "parity.h"

using namespace hyb;

TEST_CASE("gated_rmsnorm on cuda matches the cpu reference in both orders, output and all gradients",
          "[gated_rmsnorm][gpu]") {
  struct Case {
    Shape x, w;
  };
  for (auto order : {GatedNormOrder::gate_then_norm, GatedNormOrder::norm_then_gate})
    // Gs 64, 1000, 24, 16: 16-byte packs (1004: f32 only); 4 and 5 gain rows: the backward grid is
    // rounded to a multiple of them; 24000 rows: warps sum several rows into their dw rows. Gs 1000,
    // 1004 (f32), 520, 264 and 2048 take the row-group kernels (a slot keeps one gain row and sums
    // several rows into its dw registers): 520 with 3 gain rows (the grid rounded so the slots are a
    // multiple of 3), over 12006 rows as well; 264 (bf16: 4 slots a block) with 6000 rows; 2048
    // (Mamba2's d_ssm at G 1) over 5003 rows, so a slot's last step is partly past the end.
    for (const Case& c : {Case{{2, 37, 3, 50}, {3, 50}}, Case{{2, 37, 3, 50}, {50}}, Case{{3, 11, 1, 1000}, {1, 1000}},
                          Case{{5, 7}, {7}}, Case{{2, 37, 3, 64}, {3, 64}}, Case{{2, 37, 3, 64}, {64}},
                          Case{{3, 11, 1, 1004}, {1, 1004}}, Case{{3, 13, 4, 24}, {4, 24}}, Case{{4, 9, 5, 16}, {5, 16}},
                          Case{{6000, 4, 8}, {4, 8}}, Case{{2, 9, 3, 520}, {3, 520}}, Case{{3000, 2, 264}, {2, 264}},
                          Case{{4002, 3, 520}, {3, 520}}, Case{{5003, 1, 2048}, {1, 2048}}}) {
      DYNAMIC_SECTION((order == GatedNormOrder::gate_then_norm ? "gate_then_norm" : "norm_then_gate")
                      << " x " << shape_str(c.x) << " w " << shape_str(c.w)) {
        auto r = cuda_parity(
            [&](const std::vector<Var>& x) { return std::vector<Var>{gated_rmsnorm(x[0], x[1], x[2], 1e-5, order)}; },
            {random_tensor(c.x, 1, DType::f64, 1.5), random_tensor(c.x, 2, DType::f64, 2.0),
             random_tensor(c.w, 3, DType::f64, 0.3, 1.0)});
        INFO(r.report);
        REQUIRE(r.ok);
      }
    }
}
