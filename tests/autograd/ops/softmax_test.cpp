#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "autograd/ops/ops_test_util.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/softmax.h"

using namespace hyb;
using hyb::test::require_gradcheck;

namespace {

// Row-wise reference in long double: logsumexp of each row of a (rows, V) value list.
std::vector<long double> row_lse(const std::vector<double>& v, int64_t V) {
  std::vector<long double> out;
  for (size_t r = 0; r < v.size() / size_t(V); ++r) {
    long double m = v[r * size_t(V)];
    for (int64_t j = 0; j < V; ++j) m = std::max<long double>(m, v[r * size_t(V) + size_t(j)]);
    long double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::exp((long double)v[r * size_t(V) + size_t(j)] - m);
    out.push_back(m + std::log(s));
  }
  return out;
}

}  // namespace

TEST_CASE("softmax, log_softmax and logsumexp gradients match finite differences", "[softmax][cpu][grad]") {
  for (const Shape& s : {Shape{3, 7}, Shape{2, 3, 5}, Shape{1}, Shape{4, 1}}) {
    DYNAMIC_SECTION("softmax " << shape_str(s)) {
      require_gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{softmax(x[0])}; },
                        {random_tensor(s, 401, DType::f64, 2.0)});
    }
    DYNAMIC_SECTION("log_softmax " << shape_str(s)) {
      require_gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{log_softmax(x[0])}; },
                        {random_tensor(s, 402, DType::f64, 2.0)});
    }
    for (bool keepdim : {false, true}) {
      DYNAMIC_SECTION("logsumexp " << shape_str(s) << (keepdim ? " keepdim" : "")) {
        require_gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{logsumexp(x[0], keepdim)}; },
                          {random_tensor(s, 403, DType::f64, 2.0)});
      }
    }
  }
  SECTION("over a transposed input") {
    require_gradcheck(
        [](const std::vector<Var>& x) {
          Var t = transpose(x[0], 0, 1);
          return std::vector<Var>{softmax(t), log_softmax(t), logsumexp(t)};
        },
        {random_tensor({6, 4}, 404, DType::f64, 2.0)});
  }
}

TEST_CASE("softmax family forward values match a long double reference, shifted by 1000 or not", "[softmax][cpu]") {
  for (DType dt : {DType::f64, DType::f32})
    for (double shift : {0.0, 1000.0})
      for (int64_t V : {int64_t(1), int64_t(7), int64_t(1000)}) {
        DYNAMIC_SECTION(dtype_name(dt) << " V " << V << " shift " << shift) {
          Tensor x = random_tensor({5, V}, 405, dt, 3.0, shift);
          std::vector<double> xv = x.to_double_vector();
          std::vector<long double> lse = row_lse(xv, V);
          std::vector<double> want_p, want_lp, want_lse;
          for (size_t i = 0; i < xv.size(); ++i) {
            want_lp.push_back(double((long double)xv[i] - lse[i / size_t(V)]));
            want_p.push_back(double(std::exp((long double)xv[i] - lse[i / size_t(V)])));
          }
          for (long double l : lse) want_lse.push_back(double(l));
          const double tol = dt == DType::f64 ? 1e-13 : 2e-6;
          // log-probabilities near 0 are compared absolutely (floor 1): x - lse cancels there.
          REQUIRE(max_rel_error(softmax_forward(x).to_double_vector(), want_p, 1e-30) < tol);
          REQUIRE(max_rel_error(log_softmax_forward(x).to_double_vector(), want_lp, 1.0) < tol * (1 + shift));
          REQUIRE(max_rel_error(logsumexp_forward(x).to_double_vector(), want_lse, 1e-30) < tol);
          REQUIRE(logsumexp_forward(x).shape() == Shape{5});
        }
      }
}

TEST_CASE("logsumexp in f64 keeps digits that f32 would lose", "[softmax][cpu]") {
  // Two entries 1e-9 apart around 1e4: lse = 1e4 + 0.5e-9 + log 2 + O(1e-19).
  Tensor x = Tensor::from_vector<double>({1e4, 1e4 + 1e-9}, {1, 2});
  const double got = logsumexp_forward(x).item();
  REQUIRE(std::abs(got - (1e4 + 0.5e-9 + std::log(2.0))) < 4e-12);
}

TEST_CASE("logsumexp of an all -inf row is -inf with zero gradient; a +inf entry gives +inf", "[softmax][cpu]") {
  const double inf = std::numeric_limits<double>::infinity();
  Var x(Tensor::from_vector<double>({-inf, -inf, -inf, 0.5, inf, -1.25}, {2, 3}), true);
  Var l = logsumexp(x);
  std::vector<double> lv = l.data().to_double_vector();
  REQUIRE(lv[0] == -inf);
  REQUIRE(lv[1] == inf);
  clear_tape();
  Var x0(Tensor::from_vector<double>({-inf, -inf, 0.5, -0.75}, {2, 2}), true);
  backward(logsumexp(x0), Tensor::from_vector<double>({0.3, 0.7}, {2}));
  std::vector<double> g = x0.grad().to_double_vector();
  REQUIRE(g[0] == 0.0);
  REQUIRE(g[1] == 0.0);
  REQUIRE(g[2] + g[3] == Approx(0.7));
}

TEST_CASE("softmax rows sum to one and the ops reject inputs without a last dimension", "[softmax][cpu][errors]") {
  Tensor p = softmax_forward(random_tensor({4, 33}, 406, DType::f32, 5.0));
  std::vector<double> v = p.to_double_vector();
  for (int r = 0; r < 4; ++r) {
    double s = 0;
    for (int j = 0; j < 33; ++j) s += v[size_t(r * 33 + j)];
    REQUIRE(s == Approx(1.0).epsilon(1e-6));
  }
  Tensor scalar = random_tensor({}, 407);
  REQUIRE_THROWS_WITH(softmax_forward(scalar), Catch::Contains("softmax") && Catch::Contains("at least one dimension"));
  REQUIRE_THROWS_WITH(logsumexp_forward(Tensor::empty({3, 0}, DType::f64)),
                      Catch::Contains("logsumexp") && Catch::Contains("(3, 0)"));
}
