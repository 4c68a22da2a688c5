#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/norm/l2norm_op.h"
#include "layers/norm/rmsnorm_op.h"
#include "parity.h"

using namespace hyb;

TEST_CASE("rmsnorm on cuda matches the cpu reference, output and both gradients", "[rmsnorm][gpu]") {
  // 7: scalar; 64: a warp per row with the row in registers; 768 to 2056: row-group blocks (bf16 768:
  // 96 packs, 5 slots of 96 threads; 1000: 125 packs in 128 threads); 1004: packed for f32 only (bf16
  // takes the scalar warp kernel); 2056: the last warp partly idle (f32: 514 packs, past a block's
  // 512, a warp per row re-reading the row); 4100 (f32) and 8200 (bf16) too.
  for (int64_t C : {7, 64, 768, 1000, 1004, 2056, 4100, 8200}) {
    DYNAMIC_SECTION("rows 333 C " << C) {
      auto r = cuda_parity([](const std::vector<Var>& x) { return std::vector<Var>{rmsnorm(x[0], x[1], 1e-5)}; },
                           {random_tensor({3, 111, C}, 1, DType::f64, 2.0), random_tensor({C}, 2, DType::f64, 0.3, 1.0)});
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

// More rows than the backward keeps in flight, so each warp (or row-group block, for 1032, 1024 and
// 776 columns) sums several rows into its dw sums, and the cross-block reduction has more than 32
// partials per column; odd row counts, so the last row group is partly past the end (1024: bf16
// blocks of 2 slots of 3 rows, three groups in shared memory; 776: 97 packs, 128 threads a row, the last 31 idle).
TEST_CASE("rmsnorm on cuda: many rows, weight gradient over grid-stride rows", "[rmsnorm][gpu]") {
  for (auto [rows, C] : {std::pair<int64_t, int64_t>{20001, 24}, {20001, 40}, {5001, 1032}, {20001, 1024}, {9003, 776}}) {
    DYNAMIC_SECTION("rows " << rows << " C " << C) {
      auto r = cuda_parity([](const std::vector<Var>& x) { return std::vector<Var>{rmsnorm(x[0], x[1], 1e-5)}; },
                           {random_tensor({rows, C}, 4, DType::f64, 2.0), random_tensor({C}, 5, DType::f64, 0.3, 1.0)});
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

// The backward asked for dx alone or dw alone computes the same bits as when asked for both (the
// row-group kernel skips the row statistics without dx).
TEST_CASE("rmsnorm on cuda: dx alone and dw alone equal the full backward", "[rmsnorm][gpu]") {
  for (int64_t C : {64, 1024, 776}) {
    DYNAMIC_SECTION("C " << C) {
      const Device cuda = Device::cuda(0);
      const Tensor x = random_tensor({4099, C}, 6, DType::bf16, 2.0).to(cuda);
      const Tensor w = random_tensor({C}, 7, DType::bf16, 0.3, 1.0).to(cuda);
      const Tensor dy = random_tensor({4099, C}, 8, DType::bf16, 1.0).to(cuda);
      RmsNormSaved saved;
      rmsnorm_forward(x, w, 1e-5, &saved);
      const RmsNormGrads both = rmsnorm_backward(saved, dy, GradMask{3});
      const RmsNormGrads dx = rmsnorm_backward(saved, dy, GradMask{1});
      const RmsNormGrads dw = rmsnorm_backward(saved, dy, GradMask{2});
      REQUIRE(!dx.dw.defined());
      REQUIRE(!dw.dx.defined());
      REQUIRE(dx.dx.to_double_vector() == both.dx.to_double_vector());
      REQUIRE(dw.dw.to_double_vector() == both.dw.to_double_vector());
    }
  }
}

TEST_CASE("l2norm on cuda matches the cpu reference for both eps rules", "[l2norm][gpu]") {
  for (auto mode : {L2NormEps::clamp, L2NormEps::in_sqrt}) {
    auto r = cuda_parity([&](const std::vector<Var>& x) { return std::vector<Var>{l2norm(x[0], mode == L2NormEps::clamp ? 1e-12 : 1e-6, mode)}; },
                         {random_tensor({2, 37, 3, 60}, 3)});
    INFO(r.report);
    REQUIRE(r.ok);
  }
}
