#include <catch2/catch.hpp>

#include "autograd/ops/binary.h"
#include "autograd/ops/ops_test_util.h"
#include "autograd/ops/shape_ops.h"

using namespace hyb;
using hyb::test::apply_binary;
using hyb::test::require_gradcheck;

namespace {

double apply_ref(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
  }
  return 0;
}

// b of div stays away from 0 so finite differences are well conditioned.
Tensor operand_b(BinaryOp op, const Shape& s, uint64_t seed, DType dt = DType::f64) {
  return op == BinaryOp::div ? random_tensor(s, seed, dt, 0.4, 1.5) : random_tensor(s, seed, dt);
}

// The row-major index into a (broadcast) operand of the element at `out_index` of shape out.
int64_t source_index(const Shape& in, const Shape& out, int64_t out_index) {
  int64_t idx = 0, stride = 1, rem = out_index;
  for (int64_t d = int64_t(out.size()) - 1; d >= 0; --d) {
    const int64_t coord = rem % out[size_t(d)];
    rem /= out[size_t(d)];
    const int64_t k = d - int64_t(out.size() - in.size());
    if (k < 0) continue;
    if (in[size_t(k)] != 1) idx += coord * stride;
    stride *= in[size_t(k)];
  }
  return idx;
}

const BinaryOp kOps[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div};

const std::vector<std::pair<Shape, Shape>> kShapes = {
    {{3, 4}, {3, 4}}, {{3, 1, 5}, {4, 5}}, {{5}, {2, 3, 5}}, {{2, 1}, {1, 3}}, {{1}, {3, 4}}, {{4, 1, 3}, {4, 2, 1}},
    {{}, {2, 3}}, {{2, 1}, {}},
};

}  // namespace

TEST_CASE("broadcasting binary ops' gradients match finite differences", "[binary][cpu][grad]") {
  for (BinaryOp op : kOps)
    for (const auto& [sa, sb] : kShapes) {
      DYNAMIC_SECTION(binary_name(op) << " " << shape_str(sa) << " with " << shape_str(sb)) {
        require_gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{apply_binary(op, x[0], x[1])}; },
                          {random_tensor(sa, 201), operand_b(op, sb, 202)});
      }
    }
  for (BinaryOp op : kOps) {
    DYNAMIC_SECTION(binary_name(op) << " of a transposed a with a broadcast row b") {
      require_gradcheck(
          [&](const std::vector<Var>& x) { return std::vector<Var>{apply_binary(op, transpose(x[0], 0, 1), x[1])}; },
          {random_tensor({5, 3}, 203), operand_b(op, {1, 5}, 204)});
    }
  }
}

TEST_CASE("broadcasting binary ops agree with the direct formula element by element", "[binary][cpu]") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 1, 5}, {4, 5}}, {{300, 70}, {70}}, {{70000}, {70000}}, {{129, 1}, {1, 257}}, {{1}, {2, 3}}};
  for (BinaryOp op : kOps)
    for (const auto& [sa, sb] : shapes)
      for (DType dt : {DType::f32, DType::f64}) {
        DYNAMIC_SECTION(binary_name(op) << " " << shape_str(sa) << " with " << shape_str(sb) << " " << dtype_name(dt)) {
          Tensor a = random_tensor(sa, 205, dt), b = operand_b(op, sb, 206, dt);
          Tensor y = binary_forward(op, a, b);
          const Shape out = y.shape();
          std::vector<double> av = a.to_double_vector(), bv = b.to_double_vector(), want(size_t(y.numel()));
          for (int64_t i = 0; i < y.numel(); ++i)
            want[size_t(i)] = apply_ref(op, av[size_t(source_index(sa, out, i))], bv[size_t(source_index(sb, out, i))]);
          REQUIRE(max_rel_error(y.to_double_vector(), want, 1e-6) < (dt == DType::f64 ? 1e-15 : 1e-6));
        }
      }
}

TEST_CASE("binary op errors name the op and both shapes", "[binary][cpu][errors]") {
  REQUIRE_THROWS_WITH(binary_forward(BinaryOp::add, random_tensor({2, 3}, 1), random_tensor({4, 3}, 2)),
                      Catch::Contains("add") && Catch::Contains("(2, 3)") && Catch::Contains("(4, 3)"));
  REQUIRE_THROWS_WITH(mul(Var(random_tensor({3, 1, 5}, 1)), Var(random_tensor({4, 4}, 2))),
                      Catch::Contains("mul") && Catch::Contains("(3, 1, 5)") && Catch::Contains("(4, 4)"));
  REQUIRE_THROWS_WITH(binary_forward(BinaryOp::div, random_tensor({2}, 1, DType::f32), random_tensor({2}, 2)),
                      Catch::Contains("div") && Catch::Contains("f32") && Catch::Contains("f64"));
}

TEST_CASE("mul keeps each side only for the other side's gradient", "[binary][cpu][autograd]") {
  Var a(random_tensor({4, 3}, 207), true);
  Var b(random_tensor({3}, 208), false);
  Var y = mul(a, b);
  // a is not saved (only db would read it), so writing into it is not an error.
  a.data().bump_version();
  Tensor dy = random_tensor({4, 3}, 209);
  backward(y, dy);
  REQUIRE_FALSE(b.grad().defined());
  std::vector<double> g = a.grad().to_double_vector(), d = dy.to_double_vector(), bv = b.data().to_double_vector();
  for (size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == d[i] * bv[i % 3]);
}

TEST_CASE("a broadcast operand's gradient is the sum over the broadcast dims", "[binary][cpu][grad]") {
  Var a(random_tensor({2, 3, 4}, 210), true);
  Var b(random_tensor({3, 1}, 211), true);
  Tensor dy = random_tensor({2, 3, 4}, 212);
  backward(sub(a, b), dy);
  REQUIRE(b.grad().shape() == Shape{3, 1});
  std::vector<double> gb = b.grad().to_double_vector(), d = dy.to_double_vector();
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) s += d[size_t(i * 12 + j * 4 + k)];
    REQUIRE(gb[size_t(j)] == Approx(-s).epsilon(1e-14));
  }
}
