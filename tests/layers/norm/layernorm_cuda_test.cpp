// LayerNorm on cuda against the f64 CPU reference: every kernel layout (registers, strided, scalar),
// grid-stride rows with many partials, rows far from zero mean, and partial gradient masks.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/norm/layernorm_op.h"
#include "parity.h"

using namespace hyb;

namespace {

// x, weight and bias on the bf16 grid, so the bf16 run starts from the reference's exact values and
// its error is the kernel's (fp32 statistics, bf16 outputs), not the rounding of its inputs.
Tensor on_bf16_grid(const Tensor& t) { return t.to(DType::bf16).to(DType::f64); }

ParityResult layernorm_parity(int64_t rows, int64_t C, uint64_t seed, const ParityOptions& opt) {
  return cuda_parity(
      [](const std::vector<Var>& x) { return std::vector<Var>{layernorm(x[0], x[1], x[2], 1e-5)}; },
      {on_bf16_grid(random_tensor({rows, C}, seed, DType::f64, 1.5, 0.7)),
       on_bf16_grid(random_tensor({C}, seed + 1, DType::f64, 0.3, 1.0)),
       on_bf16_grid(random_tensor({C}, seed + 2, DType::f64, 0.5))},
      opt);
}

ParityOptions tolerances() {
  ParityOptions opt;
  opt.tol_f32 = 1e-5;
  opt.tol_bf16 = 1e-2;
  return opt;
}

}  // namespace

TEST_CASE("layernorm on cuda matches the cpu reference, output and all three gradients", "[layernorm][gpu]") {
  // 7 and 37: scalar, in registers (37: two columns a lane); 64 and 256: 16-byte packs in registers
  // (f32 256: two packs a lane, bf16 256: one); 1000 and 1024: packs, strided, dw and db from the
  // column-tiled kernel; 1001: scalar, strided; 4100: f32 packs, bf16 scalar (not a multiple of 8).
  for (int64_t C : {7, 37, 64, 256, 1000, 1001, 1024, 4100}) {
    DYNAMIC_SECTION("rows 333 C " << C) {
      const ParityResult r = layernorm_parity(333, C, 1, tolerances());
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

// More rows than one wave of blocks holds, so each warp (or column-tiled thread, for 1032) sums several
// rows into its dw and db, and the cross-block reduction adds many partials per column; odd row counts
// leave the last block partly empty.
TEST_CASE("layernorm on cuda: many rows, weight and bias gradients over grid-stride rows", "[layernorm][gpu]") {
  for (auto [rows, C] : {std::pair<int64_t, int64_t>{20001, 24}, {20001, 256}, {9003, 37}, {5001, 1032}}) {
    DYNAMIC_SECTION("rows " << rows << " C " << C) {
      const ParityResult r = layernorm_parity(rows, C, 4, tolerances());
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

// Rows around 1000 with spread 1: the variance as E[x^2] - mean^2 in fp32 would be off by tens of
// percent; the two-pass form's error is the fp32 rounding of the mean's sum (about 1e-4 of xhat).
TEST_CASE("layernorm on cuda keeps the variance of rows far from zero mean", "[layernorm][gpu]") {
  ParityOptions opt;
  opt.tol_f32 = 2e-3;
  opt.bf16 = false;  // bf16 spacing at 1000 is 4: the rows' spread does not survive the rounding
  for (int64_t C : {37, 256, 1000}) {
    DYNAMIC_SECTION("C " << C) {
      const ParityResult r = cuda_parity(
          [](const std::vector<Var>& x) { return std::vector<Var>{layernorm(x[0], x[1], x[2], 1e-5)}; },
          {random_tensor({65, C}, 7, DType::f64, 1.0, 1000.0), random_tensor({C}, 8, DType::f64, 0.3, 1.0),
           random_tensor({C}, 9, DType::f64, 0.5)},
          opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("layernorm on cuda: one gradient alone equals the full backward, bit for bit", "[layernorm][gpu]") {
  for (int64_t C : {37, 256, 1032}) {
    DYNAMIC_SECTION("C " << C) {
      const Device cuda = Device::cuda(0);
      const Tensor x = random_tensor({4099, C}, 10, DType::bf16, 2.0, 0.5).to(cuda);
      const Tensor w = random_tensor({C}, 11, DType::bf16, 0.3, 1.0).to(cuda);
      const Tensor b = random_tensor({C}, 12, DType::bf16, 0.5).to(cuda);
      const Tensor dy = random_tensor({4099, C}, 13, DType::bf16, 1.0).to(cuda);
      LayerNormSaved s;
      const Tensor y = layernorm_forward(x, w, b, 1e-5, &s);
      REQUIRE(layernorm_forward(x, w, b, 1e-5, nullptr).to_double_vector() == y.to_double_vector());
      const LayerNormGrads all = layernorm_backward(s, dy, GradMask{7});
      const LayerNormGrads dx = layernorm_backward(s, dy, GradMask{1});
      const LayerNormGrads dw = layernorm_backward(s, dy, GradMask{2});
      const LayerNormGrads db = layernorm_backward(s, dy, GradMask{4});
      REQUIRE((!dx.dw.defined() && !dx.db.defined() && !dw.dx.defined() && !db.dx.defined()));
      REQUIRE(dx.dx.to_double_vector() == all.dx.to_double_vector());
      REQUIRE(dw.dw.to_double_vector() == all.dw.to_double_vector());
      REQUIRE(db.db.to_double_vector() == all.db.to_double_vector());
    }
  }
}
