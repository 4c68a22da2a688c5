#include <catch2/catch.hpp>

#include "autograd/ops/ops_test_util.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape_ops.h"

using namespace hyb;
using hyb::test::require_gradcheck;

namespace {

// Direct sum over `dims` (sorted, wrapped) of a row-major tensor, in the keepdim layout.
std::vector<double> direct_sum(const Tensor& x, const std::vector<int64_t>& dims, double scale) {
  const Shape& s = x.shape();
  Shape out = s;
  for (int64_t d : dims) out[size_t(d)] = 1;
  std::vector<double> v = x.to_double_vector(), r(size_t(shape_numel(out)), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, o = 0, stride = 1;
    for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
      const int64_t c = rem % s[size_t(d)];
      rem /= s[size_t(d)];
      if (out[size_t(d)] != 1) o += c * stride;
      stride *= out[size_t(d)];
    }
    r[size_t(o)] += v[size_t(i)];
  }
  for (double& e : r) e *= scale;
  return r;
}

struct ReduceCase {
  Shape shape;
  std::vector<int64_t> dims;  // as passed (may be negative or empty)
  std::vector<int64_t> wrapped;
};

const std::vector<ReduceCase> kCases = {
    {{3, 4, 5}, {}, {0, 1, 2}},      {{3, 4, 5}, {1}, {1}},          {{3, 4, 5}, {0, 2}, {0, 2}},
    {{3, 4, 5}, {-1}, {2}},          {{2, 3, 4, 5}, {1, 3}, {1, 3}}, {{2, 3, 4, 5}, {3, 0, 2}, {0, 2, 3}},
    {{6, 1, 7}, {0, 1}, {0, 1}},
};

}  // namespace

TEST_CASE("sum and mean gradients match finite differences over several dims, keepdim or not", "[reduce][cpu][grad]") {
  for (const ReduceCase& c : kCases)
    for (bool keepdim : {false, true})
      for (bool is_mean : {false, true}) {
        DYNAMIC_SECTION((is_mean ? "mean " : "sum ") << shape_str(c.shape) << " dims " << shape_str(c.dims)
                                                      << (keepdim ? " keepdim" : "")) {
          require_gradcheck(
              [&](const std::vector<Var>& x) {
                return std::vector<Var>{is_mean ? mean(x[0], c.dims, keepdim) : sum(x[0], c.dims, keepdim)};
              },
              {random_tensor(c.shape, 301)});
        }
      }
}

TEST_CASE("sum and mean agree with a direct loop, for f32, f64 and non-contiguous input", "[reduce][cpu]") {
  for (const ReduceCase& c : kCases)
    for (DType dt : {DType::f32, DType::f64}) {
      DYNAMIC_SECTION(shape_str(c.shape) << " dims " << shape_str(c.dims) << " " << dtype_name(dt)) {
        Tensor x = random_tensor(c.shape, 302, dt);
        Tensor s = sum_forward(x, c.dims, true);
        Tensor m = sum_forward(x, c.dims, false, 0.25);
        REQUIRE(max_rel_error(s.to_double_vector(), direct_sum(x, c.wrapped, 1.0), 1e-6) < 1e-6);
        REQUIRE(max_rel_error(m.to_double_vector(), direct_sum(x, c.wrapped, 0.25), 1e-6) < 1e-6);
        // The same values through a transposed (strided) view of a transposed copy.
        Tensor xt = x.transpose(0, -1).contiguous().transpose(0, -1);
        REQUIRE_FALSE(xt.is_contiguous());
        REQUIRE(sum_forward(xt, c.dims, true).to_double_vector() == s.to_double_vector());
      }
    }
}

TEST_CASE("a long sum is accurate to f64 rounding and covers several parallel chunks", "[reduce][cpu]") {
  Tensor x = random_tensor({3, 100003}, 303);
  std::vector<double> want = direct_sum(x, {1}, 1.0);
  REQUIRE(max_rel_error(sum_forward(x, {1}, false).to_double_vector(), want) < 1e-12);
  Tensor cols = random_tensor({100003, 3}, 304);
  REQUIRE(max_rel_error(sum_forward(cols, {0}, false).to_double_vector(), direct_sum(cols, {0}, 1.0)) < 1e-12);
}

TEST_CASE("sum_to_shape sums a gradient back over the broadcast dims", "[reduce][cpu]") {
  Tensor g = random_tensor({3, 4, 5}, 305);
  REQUIRE(sum_to_shape(g, {3, 4, 5}).same_storage(g));
  Tensor r = sum_to_shape(g, {4, 1});
  REQUIRE(r.shape() == Shape{4, 1});
  REQUIRE(max_rel_error(r.to_double_vector(), direct_sum(g, {0, 2}, 1.0)) < 1e-14);
  Tensor r1 = sum_to_shape(g, {1, 4, 5});
  REQUIRE(max_rel_error(r1.to_double_vector(), direct_sum(g, {0}, 1.0)) < 1e-14);
  REQUIRE_THROWS_WITH(sum_to_shape(g, {3}), Catch::Contains("(3,)") && Catch::Contains("(3, 4, 5)"));
}

TEST_CASE("reduction errors name the op, the dimension and the shape", "[reduce][cpu][errors]") {
  Var x(random_tensor({2, 3}, 306));
  REQUIRE_THROWS_WITH(sum(x, {1, -1}), Catch::Contains("sum") && Catch::Contains("dimension 1 repeated") &&
                                            Catch::Contains("(2, 3)"));
  REQUIRE_THROWS_WITH(mean(x, {2}), Catch::Contains("mean") && Catch::Contains("dimension 2 out of range") &&
                                        Catch::Contains("(2, 3)"));
}
