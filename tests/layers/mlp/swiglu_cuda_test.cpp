#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/linear/linear_op.h"
#include "layers/mlp/swiglu_op.h"
#include "parity.h"

using namespace hyb;

TEST_CASE("swiglu on cuda matches the cpu reference", "[swiglu][gpu]") {
  // 37 x 129: packs and a 5-element tail; 3: tail only; 2100 x 1100: more packs than threads in the grid.
  for (const Shape& shape : {Shape{37, 129}, Shape{64, 256}, Shape{3}, Shape{2100, 1100}}) {
    DYNAMIC_SECTION(shape_str(shape)) {
      auto r = cuda_parity([](const std::vector<Var>& x) { return std::vector<Var>{swiglu(x[0], x[1])}; },
                           {random_tensor(shape, 1, DType::f64, 2.0), random_tensor(shape, 2)});
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("linear with bias on cuda matches the cpu reference at odd sizes", "[linear][gpu]") {
  for (auto [N, in, out] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 7, 5}, {37, 129, 65}, {300, 64, 1000}}) {
    DYNAMIC_SECTION("N" << N << " in" << in << " out" << out) {
      auto r = cuda_parity([](const std::vector<Var>& x) { return std::vector<Var>{linear(x[0], x[1], x[2])}; },
                           {random_tensor({N, in}, 3), random_tensor({out, in}, 4, DType::f64, 0.1), random_tensor({out}, 5)});
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}
