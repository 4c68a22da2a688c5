#include <catch2/catch.hpp>

#include "autograd/ops/ops_test_util.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/unary.h"

using namespace hyb;
using hyb::test::require_gradcheck;

namespace {

using Fn = std::function<Var(const Var&)>;

// Each op is checked through a following silu, so a backward that only has the right shape
// (or that passes dy through in the wrong order) fails the comparison.
void check_unary_shape_op(const Fn& op, const Shape& in, uint64_t seed) {
  require_gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{silu(op(x[0]))}; },
                    {random_tensor(in, seed)});
}

}  // namespace

TEST_CASE("view-like shape ops' gradients match finite differences", "[shape][cpu][grad]") {
  SECTION("reshape (2, 3, 4) -> (4, -1)") { check_unary_shape_op([](const Var& x) { return reshape(x, {4, -1}); }, {2, 3, 4}, 501); }
  SECTION("reshape of a transposed input (a copy)") {
    check_unary_shape_op([](const Var& x) { return reshape(transpose(x, 0, 2), {-1}); }, {2, 3, 4}, 502);
  }
  SECTION("view (6, 4) -> (2, 12)") { check_unary_shape_op([](const Var& x) { return view(x, {2, 12}); }, {6, 4}, 503); }
  SECTION("transpose (2, 3, 4) dims 0 and 2") { check_unary_shape_op([](const Var& x) { return transpose(x, 0, -1); }, {2, 3, 4}, 504); }
  SECTION("permute 4-D (2, 3, 4, 5) -> (3, 0, 1, 2)") {
    check_unary_shape_op([](const Var& x) { return permute(x, {3, 0, 1, 2}); }, {2, 3, 4, 5}, 505);
  }
  SECTION("permute 4-D with negative dims") {
    check_unary_shape_op([](const Var& x) { return permute(x, {0, -2, 1, -1}); }, {2, 3, 4, 5}, 506);
  }
  SECTION("slice with step 3 and a negative start") {
    check_unary_shape_op([](const Var& x) { return slice(x, 1, -9, 10, 3); }, {3, 11}, 507);
  }
  SECTION("slice of a slice along two dims") {
    check_unary_shape_op([](const Var& x) { return slice(slice(x, 0, 1, 4, 2), 2, 0, 5, 2); }, {5, 2, 6}, 508);
  }
  SECTION("narrow") { check_unary_shape_op([](const Var& x) { return narrow(x, -1, 2, 3); }, {4, 7}, 509); }
  SECTION("contiguous of a permuted input") {
    check_unary_shape_op([](const Var& x) { return contiguous(permute(x, {2, 0, 1})); }, {2, 3, 4}, 510);
  }
  SECTION("unsqueeze then squeeze") {
    check_unary_shape_op([](const Var& x) { return squeeze(unsqueeze(x, -1), 0); }, {1, 5}, 511);
  }
  SECTION("expand (3, 1) -> (2, 3, 4) and with -1") {
    check_unary_shape_op([](const Var& x) { return expand(x, {2, 3, 4}); }, {3, 1}, 512);
    check_unary_shape_op([](const Var& x) { return expand(x, {5, -1, 4}); }, {3, 1}, 513);
  }
}

TEST_CASE("concat and split of unequal pieces: gradients match finite differences", "[shape][cpu][grad]") {
  SECTION("concat of three inputs along dim 1") {
    require_gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{silu(concat({x[0], x[1], x[2]}, 1))}; },
                      {random_tensor({2, 1, 3}, 514), random_tensor({2, 4, 3}, 515), random_tensor({2, 2, 3}, 516)});
  }
  SECTION("concat along the last dim of a transposed input") {
    require_gradcheck(
        [](const std::vector<Var>& x) { return std::vector<Var>{concat({transpose(x[0], 0, 1), x[1]}, -1)}; },
        {random_tensor({5, 3}, 517), random_tensor({3, 2}, 518)});
  }
  SECTION("split into (1, 4, 2) along dim 0, every piece used") {
    require_gradcheck(
        [](const std::vector<Var>& x) {
          std::vector<Var> p = split(x[0], {1, 4, 2}, 0);
          return std::vector<Var>{silu(p[0]), exp(p[1]), p[2]};
        },
        {random_tensor({7, 3}, 519)});
  }
  SECTION("split along the last dim with the middle piece unused") {
    require_gradcheck(
        [](const std::vector<Var>& x) {
          std::vector<Var> p = split(x[0], {2, 3, 1}, -1);
          return std::vector<Var>{silu(p[0]), p[2]};
        },
        {random_tensor({2, 6}, 520)});
  }
}

TEST_CASE("view-like ops return views that share the input's storage", "[shape][cpu]") {
  Var x(random_tensor({2, 3, 4}, 521), true);
  REQUIRE(reshape(x, {6, 4}).data().same_storage(x.data()));
  REQUIRE(view(x, {24}).data().same_storage(x.data()));
  REQUIRE(transpose(x, 0, 1).data().same_storage(x.data()));
  REQUIRE(permute(x, {2, 1, 0}).data().same_storage(x.data()));
  REQUIRE(slice(x, 2, 0, 4, 2).data().same_storage(x.data()));
  REQUIRE(narrow(x, 1, 1, 2).data().same_storage(x.data()));
  REQUIRE(unsqueeze(x, 0).data().same_storage(x.data()));
  REQUIRE(expand(unsqueeze(x, 0), {5, 2, 3, 4}).data().same_storage(x.data()));
  for (const Var& piece : split(x, {1, 1}, 0)) REQUIRE(piece.data().same_storage(x.data()));
  REQUIRE(contiguous(x).cell() == x.cell());  // already contiguous: the same Var, no node
  REQUIRE_FALSE(reshape(transpose(x, 0, 2), {24}).data().same_storage(x.data()));
  clear_tape();
}

TEST_CASE("concat and split forward values are the pieces in order", "[shape][cpu]") {
  Tensor a = random_tensor({2, 1, 3}, 522), b = random_tensor({2, 4, 3}, 523);
  Tensor c = concat_forward({a, b}, 1);
  REQUIRE(c.shape() == Shape{2, 5, 3});
  REQUIRE(c.narrow(1, 0, 1).to_double_vector() == a.to_double_vector());
  REQUIRE(c.narrow(1, 1, 4).to_double_vector() == b.to_double_vector());
  std::vector<Var> parts = split(Var(c), {1, 4}, 1);
  REQUIRE(parts[0].data().to_double_vector() == a.to_double_vector());
  REQUIRE(parts[1].data().to_double_vector() == b.to_double_vector());
}

TEST_CASE("shape op errors name the op and the shapes involved", "[shape][cpu][errors]") {
  Var a(random_tensor({2, 3}, 524)), b(random_tensor({4, 4}, 525));
  REQUIRE_THROWS_WITH(concat({a, b}, 0), Catch::Contains("concat") && Catch::Contains("(4, 4)") &&
                                              Catch::Contains("(2, 3)") && Catch::Contains("dimension 0"));
  REQUIRE_THROWS_WITH(split(b, {1, 2}, 1), Catch::Contains("split") && Catch::Contains("(1, 2)") &&
                                                Catch::Contains("(4, 4)") && Catch::Contains("sum to 3"));
  REQUIRE_THROWS_WITH(expand(a, {3, 3}), Catch::Contains("expand") && Catch::Contains("(2, 3)") &&
                                              Catch::Contains("(3, 3)"));
  REQUIRE_THROWS_WITH(expand(a, {-1, 2, 3}), Catch::Contains("expand") && Catch::Contains("-1"));
}
