// The gated RMSNorm on the CPU: gradients in both orders and both weight layouts, agreement with
// the same math composed of existing ops, bad inputs.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "autograd/ops/binary.h"
#include "autograd/ops/unary.h"
#include "compare.h"
#include "layers/norm/gated_rmsnorm_op.h"
#include "layers/norm/rmsnorm_op.h"

using namespace hyb;

namespace {
const char* order_name(GatedNormOrder o) { return o == GatedNormOrder::gate_then_norm ? "gate_then_norm" : "norm_then_gate"; }
}  // namespace

TEST_CASE("gated RMSNorm gradients of x, z and the gain match finite differences in both orders", "[gated_rmsnorm][cpu][grad]") {
  for (GatedNormOrder order : {GatedNormOrder::gate_then_norm, GatedNormOrder::norm_then_gate}) {
    for (bool per_group : {false, true}) {
      DYNAMIC_SECTION(order_name(order) << (per_group ? " (G, Gs) gain" : " (Gs,) gain")) {
        const Shape xs{2, 3, 2, 5};
        Tensor w = per_group ? random_tensor({2, 5}, 3, DType::f64, 0.5, 1.0) : random_tensor({5}, 3, DType::f64, 0.5, 1.0);
        auto r = gradcheck(
            [&](const std::vector<Var>& x) { return std::vector<Var>{gated_rmsnorm(x[0], x[1], x[2], 1e-5, order)}; },
            {random_tensor(xs, 1), random_tensor(xs, 2), w});
        INFO(r.report);
        REQUIRE(r.max_error < 1e-6);
      }
    }
  }
}

TEST_CASE("gated RMSNorm equals rmsnorm(x silu(z)) w and rmsnorm(x) w silu(z) built from existing ops, gradients too",
          "[gated_rmsnorm][cpu]") {
  const Shape xs{3, 4, 7};
  for (GatedNormOrder order : {GatedNormOrder::gate_then_norm, GatedNormOrder::norm_then_gate}) {
    DYNAMIC_SECTION(order_name(order)) {
      Tensor xt = random_tensor(xs, 10), zt = random_tensor(xs, 11), wt = random_tensor({7}, 12, DType::f64, 0.5, 1.0);
      Tensor dy = random_tensor(xs, 13);
      Var x1(xt, true), z1(zt, true), w1(wt, true), x2(xt, true), z2(zt, true), w2(wt, true);
      Var fused = gated_rmsnorm(x1, z1, w1, 1e-3, order);
      Var composed = order == GatedNormOrder::gate_then_norm ? rmsnorm(mul(x2, silu(z2)), w2, 1e-3)
                                                             : mul(rmsnorm(x2, w2, 1e-3), silu(z2));
      REQUIRE(rel_error(fused.data(), composed.data()) < 1e-14);
      backward({fused, composed}, {dy, dy});
      REQUIRE(rel_error(x1.grad(), x2.grad()) < 1e-13);
      REQUIRE(rel_error(z1.grad(), z2.grad()) < 1e-13);
      REQUIRE(rel_error(w1.grad(), w2.grad()) < 1e-13);
    }
  }
}

TEST_CASE("gated RMSNorm rejects a gate or gain that does not fit x, naming the op and the shapes", "[gated_rmsnorm][cpu]") {
  Tensor x = random_tensor({2, 3, 4}, 20);
  REQUIRE_THROWS_WITH(gated_rmsnorm_forward(x, random_tensor({2, 3, 5}, 21), random_tensor({4}, 22), 1e-5,
                                            GatedNormOrder::gate_then_norm, nullptr),
                      Catch::Contains("gated_rmsnorm_forward") && Catch::Contains("(2, 3, 5)"));
  REQUIRE_THROWS_WITH(gated_rmsnorm_forward(x, random_tensor({2, 3, 4}, 21), random_tensor({2, 4}, 22), 1e-5,
                                            GatedNormOrder::gate_then_norm, nullptr),
                      Catch::Contains("weight is (2, 4)") && Catch::Contains("suffix"));
  REQUIRE_THROWS_WITH(gated_rmsnorm_forward(x, random_tensor({2, 3, 4}, 21), random_tensor({4}, 22), 0.0,
                                            GatedNormOrder::norm_then_gate, nullptr),
                      Catch::Contains("eps"));
}
