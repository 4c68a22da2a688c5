#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "autograd/ops/ops_test_util.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/unary.h"

using namespace hyb;
using hyb::test::map_values;
using hyb::test::require_gradcheck;

namespace {

struct UnaryCase {
  const char* name;
  std::function<Var(const Var&)> op;
  std::function<double(double)> ref;  // the direct formula, in f64
  double mean, std;                   // input distribution (log needs positive inputs)
  // Added to |want| in the relative error. 1 where the reference or the op cancels: gelu_tanh's tanh
  // form loses absolute precision in 1 + tanh u near -1; x + c in f32 near x = -c. Also 1 for gelu:
  // in its negative tail erfc(z) amplifies the f32 rounding of z = -x/sqrt 2 by 2 z^2 (1e-5 at x = -13).
  double floor = 1e-30;
};

const double kPi = 3.14159265358979323846;

std::vector<UnaryCase> unary_cases() {
  return {
      {"silu", [](const Var& x) { return silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }, 0, 3},
      {"gelu", [](const Var& x) { return gelu(x); }, [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); },
       0, 3, 1.0},
      {"gelu_tanh", [](const Var& x) { return gelu_tanh(x); },
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x))); }, 0, 3, 1.0},
      {"sigmoid", [](const Var& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, 0, 3},
      {"softplus", [](const Var& x) { return softplus(x); },
       [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, 0, 12},
      {"logsigmoid", [](const Var& x) { return logsigmoid(x); },
       [](double x) { return x > 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }, 0, 5},
      {"exp", [](const Var& x) { return exp(x); }, [](double x) { return std::exp(x); }, 0, 2},
      {"relu", [](const Var& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, 0, 1},
      {"log", [](const Var& x) { return log(x); }, [](double x) { return std::log(x); }, 3, 0.7},
      {"neg", [](const Var& x) { return neg(x); }, [](double x) { return -x; }, 0, 1},
      {"add_scalar", [](const Var& x) { return add_scalar(x, 0.37); }, [](double x) { return x + 0.37; }, 0, 1, 1.0},
      {"mul_scalar", [](const Var& x) { return mul_scalar(x, -1.7); }, [](double x) { return -1.7 * x; }, 0, 1},
  };
}

}  // namespace

TEST_CASE("every pointwise op's gradient matches finite differences, contiguous or not", "[unary][cpu][grad]") {
  for (const UnaryCase& c : unary_cases()) {
    DYNAMIC_SECTION(c.name << " (3, 7)") {
      require_gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{c.op(x[0])}; },
                        {random_tensor({3, 7}, 101, DType::f64, c.std, c.mean)});
    }
    DYNAMIC_SECTION(c.name << " transposed (5, 3)") {
      require_gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{c.op(transpose(x[0], 0, 1))}; },
                        {random_tensor({3, 5}, 102, DType::f64, c.std, c.mean)});
    }
  }
}

TEST_CASE("every pointwise op's forward matches its direct formula in f64 and f32", "[unary][cpu]") {
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {DType::f64, DType::f32}) {
      DYNAMIC_SECTION(c.name << " " << dtype_name(dt)) {
        // 40,000 elements: more than one parallel chunk, and a tail that is not a multiple of the vector width.
        Tensor x = random_tensor({40001}, 103, dt, c.std, c.mean);
        Tensor y = c.op(Var(x)).data();
        REQUIRE(y.dtype() == dt);
        REQUIRE(y.shape() == x.shape());
        const double err = max_rel_error(y.to_double_vector(), map_values(x, c.ref), c.floor);
        INFO("max relative error " << err);
        REQUIRE(err < (dt == DType::f64 ? 1e-13 : 2e-6));
      }
    }
  }
}

TEST_CASE("softplus is the identity above 20 with gradient exactly dy there", "[unary][cpu]") {
  Tensor x = Tensor::from_vector<double>({20.5, 33.25, 19.5, -3.75}, {4});
  Var v(x, true);
  Var y = softplus(v);
  std::vector<double> yv = y.data().to_double_vector();
  REQUIRE(yv[0] == 20.5);
  REQUIRE(yv[1] == 33.25);
  REQUIRE(yv[2] == Approx(std::log1p(std::exp(19.5))).epsilon(1e-15));
  Tensor dy = random_tensor({4}, 104);
  backward(y, dy);
  std::vector<double> g = v.grad().to_double_vector(), d = dy.to_double_vector();
  REQUIRE(g[0] == d[0]);
  REQUIRE(g[1] == d[1]);
  REQUIRE(g[2] == Approx(d[2] / (1 + std::exp(-19.5))).epsilon(1e-15));
}

TEST_CASE("pointwise ops stay finite and accurate at large magnitudes", "[unary][cpu]") {
  for (DType dt : {DType::f32, DType::f64}) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      Tensor x = Tensor::from_vector<double>({-100.0, -30.0, 30.0, 100.0}, {4}).to(dt);
      auto values = [&](UnaryOp op) { return unary_forward(op, x).to_double_vector(); };
      std::vector<double> s = values(UnaryOp::silu), g = values(UnaryOp::gelu_tanh);
      std::vector<double> sg = values(UnaryOp::sigmoid), ls = values(UnaryOp::logsigmoid);
      for (int i = 0; i < 4; ++i) {
        REQUIRE(std::isfinite(s[size_t(i)]));
        REQUIRE(std::isfinite(g[size_t(i)]));
        REQUIRE(std::isfinite(ls[size_t(i)]));
      }
      REQUIRE(s[3] == Approx(100.0));
      REQUIRE(std::abs(s[0]) < 1e-40);
      REQUIRE(g[0] == 0.0);
      REQUIRE(sg[3] == 1.0);
      REQUIRE(ls[0] == Approx(-100.0));
      REQUIRE(ls[2] == Approx(-std::exp(-30.0)).epsilon(1e-5));
    }
  }
}

// Values and slopes from x (1 + erf(x / sqrt 2)) / 2, the erf form PyTorch writes, evaluated separately in
// double: an independent check of the erfc form the op computes.
TEST_CASE("gelu is x Phi(x) with slope Phi(x) + x phi(x), exactly at known points", "[gelu][cpu]") {
  const std::vector<double> xs = {-3.0, -1.0, -0.5, 0.25, 1.0, 2.5};
  const std::vector<double> ys = {-0.00404969409489031, -0.15865525393145707, -0.15426876936299344,
                                  0.14967658142073093,  0.8413447460685429,   2.4844758366855597};
  const std::vector<double> slopes = {-0.01194564720418392, -0.08331547058768629, 0.13250487534383712,
                                      0.695373354883636,    1.0833154705876864,   1.037611085908145};
  for (DType dt : {DType::f64, DType::f32}) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      Var x(Tensor::from_vector<double>(xs, {6}).to(dt), true);
      Var y = gelu(x);
      backward(y, Tensor::full({6}, 1.0, dt));
      const double tol = dt == DType::f64 ? 1e-12 : 1e-6;
      REQUIRE(max_rel_error(y.data().to_double_vector(), ys) < tol);
      REQUIRE(max_rel_error(x.grad().to_double_vector(), slopes) < tol);
    }
  }
}

TEST_CASE("gelu's gradient matches finite differences on rows of 37", "[gelu][cpu][grad]") {
  require_gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{gelu(x[0])}; },
                    {random_tensor({4, 37}, 108, DType::f64, 2.0, 0.3)});
}

// Phi is computed as erfc(-x / sqrt 2) / 2, so the negative tail keeps its relative precision where
// 1 + erf would have cancelled to 0 (f32 to 2 z^2 ulp, z = -x/sqrt 2: the rounding of z), and the far
// tails are the identity and 0 with slopes 1 and 0.
TEST_CASE("gelu keeps relative precision in the negative tail and saturates in both", "[gelu][cpu]") {
  for (DType dt : {DType::f64, DType::f32}) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      Var x(Tensor::from_vector<double>({-100.0, -9.0, 30.0, 100.0}, {4}).to(dt), true);
      Var y = gelu(x);
      backward(y, Tensor::full({4}, 1.0, dt));
      const std::vector<double> v = y.data().to_double_vector(), g = x.grad().to_double_vector();
      const double tail = -9.0 * 0.5 * std::erfc(9.0 / std::sqrt(2.0));  // -1.016e-18
      REQUIRE(v[0] == 0.0);
      REQUIRE(v[1] == Approx(tail).epsilon(dt == DType::f64 ? 1e-13 : 2e-5));
      REQUIRE(v[2] == 30.0);
      REQUIRE(v[3] == 100.0);
      REQUIRE(g[0] == 0.0);
      REQUIRE(g[2] == 1.0);
      REQUIRE(g[3] == 1.0);
    }
  }
}

TEST_CASE("exp and sigmoid save their output, the others their input", "[unary][cpu][autograd]") {
  for (UnaryOp op : {UnaryOp::exp, UnaryOp::sigmoid, UnaryOp::silu, UnaryOp::log}) {
    const bool saves_y = unary_saves_output(op);
    auto run = [&](bool touch_saved) {
      Var x(random_tensor({6}, 105, DType::f64, 0.5, 2.0), true);
      Var y = op == UnaryOp::exp       ? exp(x)
              : op == UnaryOp::sigmoid ? sigmoid(x)
              : op == UnaryOp::silu    ? silu(x)
                                       : log(x);
      // An in-place write bumps the storage version; only a saved tensor's version is checked.
      (touch_saved == saves_y ? y.data() : x.data()).bump_version();
      backward(y, random_tensor({6}, 106));
    };
    DYNAMIC_SECTION(unary_name(op) << ": writing into the saved tensor is reported") {
      REQUIRE_THROWS_WITH(run(true), Catch::Contains(unary_name(op)) &&
                                         Catch::Contains(saves_y ? "saved tensor y" : "saved tensor x"));
      clear_tape();
    }
    DYNAMIC_SECTION(unary_name(op) << ": writing into the unsaved one is not") { REQUIRE_NOTHROW(run(false)); }
  }
}

TEST_CASE("pointwise ops on bf16 CPU tensors name the op in the error", "[unary][cpu][errors]") {
  Tensor x = random_tensor({3}, 107, DType::f32).to(DType::bf16);
  REQUIRE_THROWS_WITH(unary_forward(UnaryOp::gelu_tanh, x), Catch::Contains("gelu_tanh") && Catch::Contains("bf16"));
}
