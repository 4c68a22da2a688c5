#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "autograd/tape.h"
#include "core/tensor_math.h"

using namespace hyb;

// y = x * x elementwise, on the CPU in f64: the smallest op that exercises the tape.
static Var square(const Var& x) {
  Tensor y = x.data().clone();
  const double* xp = x.data().data<double>();
  double* yp = y.data<double>();
  for (int64_t i = 0; i < y.numel(); ++i) yp[i] = xp[i] * xp[i];
  return record_op1(
      "square", {x}, y,
      [xs = x.data()](const Tensor& dy, GradMask) {
        Tensor dx = dy.clone();
        const double* xp = xs.data<double>();
        double* dp = dx.data<double>();
        for (int64_t i = 0; i < dx.numel(); ++i) dp[i] *= 2 * xp[i];
        return Grads{dx};
      },
      {{"x", x.data()}});
}

TEST_CASE("backward accumulates a leaf used twice and frees the tape", "[autograd]") {
  Var x(random_tensor({5}, 1), true);
  Var y = square(square(x));  // x^4
  Var z = square(x);          // x^2
  REQUIRE(tape_size() == 3);
  backward({y, z}, {Tensor::full({5}, 1.0, DType::f64), Tensor::full({5}, 1.0, DType::f64)});
  REQUIRE(tape_size() == 0);
  std::vector<double> g = x.grad().to_double_vector(), xv = x.data().to_double_vector();
  for (size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == Approx(4 * std::pow(xv[i], 3) + 2 * xv[i]));
  // A second backward adds into the leaf's gradient.
  backward(square(x), Tensor::full({5}, 1.0, DType::f64));
  std::vector<double> g2 = x.grad().to_double_vector();
  for (size_t i = 0; i < g2.size(); ++i) REQUIRE(g2[i] == Approx(g[i] + 2 * xv[i]));
}

TEST_CASE("nothing is recorded under NoGradGuard", "[autograd]") {
  Var x(random_tensor({3}, 2), true);
  {
    NoGradGuard g;
    Var y = square(x);
    REQUIRE_FALSE(y.requires_grad());
  }
  REQUIRE(tape_size() == 0);
  REQUIRE(square(x).requires_grad());
  clear_tape();
}

TEST_CASE("modifying a saved tensor in place before backward is an error naming the op", "[autograd]") {
  Var x(random_tensor({4}, 3), true);
  ModuleScope scope("model");
  Var y = square(x);
  scale_(x.data(), 2.0);
  REQUIRE_THROWS_WITH(backward(y, Tensor::full({4}, 1.0, DType::f64)),
                      Catch::Contains("square in model") && Catch::Contains("saved tensor x") &&
                          Catch::Contains("modified in place"));
  clear_tape();
}

TEST_CASE("the grad-ready hook fires once per leaf when its gradient is complete", "[autograd]") {
  Var a(random_tensor({2}, 4), true, "a"), b(random_tensor({2}, 5), true, "b");
  std::vector<std::string> order;
  set_grad_ready_hook([&](GradCell& c) { order.push_back(c.name); });
  Var y = square(square(a));
  Var z = square(b);
  Var w = square(a);
  backward({y, z, w}, {Tensor::full({2}, 1.0, DType::f64), Tensor::full({2}, 1.0, DType::f64),
                       Tensor::full({2}, 1.0, DType::f64)});
  set_grad_ready_hook(nullptr);
  REQUIRE(order == std::vector<std::string>{"b", "a"});
}

TEST_CASE("gradcheck passes a correct backward and flags a wrong one", "[autograd][grad]") {
  auto good = gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{square(x[0])}; },
                        {random_tensor({6}, 9)});
  INFO(good.report);
  REQUIRE(good.max_error < 1e-8);
  auto wrong = gradcheck(
      [](const std::vector<Var>& x) {
        Var y = square(x[0]);
        // Same forward, backward off by a factor 2.
        return std::vector<Var>{record_op1("half", {y}, y.data().clone(), [](const Tensor& d, GradMask) {
          Tensor h = d.clone();
          scale_(h, 0.5);
          return Grads{h};
        })};
      },
      {random_tensor({6}, 9)});
  REQUIRE(wrong.max_error > 0.1);
}
