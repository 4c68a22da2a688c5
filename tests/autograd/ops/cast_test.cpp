#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "autograd/ops/cast.h"

using namespace hyb;

// A cast rounds, so finite differences through it measure the rounding, not the derivative;
// the claim checked instead is exact: the gradient of a cast is the cast of the gradient.
TEST_CASE("cast rounds the forward and casts the gradient back to the input dtype", "[cast][cpu][grad]") {
  for (DType to : {DType::bf16, DType::f64}) {
    DYNAMIC_SECTION("f32 -> " << dtype_name(to)) {
      Var w(random_tensor({3, 5}, 601, DType::f32), true);
      Var w_low = cast(w, to);
      REQUIRE(w_low.dtype() == to);
      REQUIRE(w_low.data().to_double_vector() == w.data().to(to).to_double_vector());
      Tensor dy = random_tensor({3, 5}, 602, to);
      backward(w_low, dy);
      REQUIRE(w.grad().dtype() == DType::f32);
      REQUIRE(w.grad().to_double_vector() == dy.to(DType::f32).to_double_vector());
    }
  }
}

TEST_CASE("cast to the same dtype is the input itself and records nothing", "[cast][cpu]") {
  Var x(random_tensor({4}, 603), true);
  const size_t before = tape_size();
  REQUIRE(cast(x, DType::f64).cell() == x.cell());
  REQUIRE(tape_size() == before);
}

TEST_CASE("cast to an integer dtype is refused with both dtypes named", "[cast][cpu][errors]") {
  REQUIRE_THROWS_WITH(cast(Var(random_tensor({2}, 604, DType::f32), true), DType::i32),
                      Catch::Contains("cast") && Catch::Contains("f32") && Catch::Contains("i32"));
}
