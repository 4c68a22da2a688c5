// LayerNorm on the CPU: finite differences for x, weight and bias, agreement with the direct two-pass
// formula and its saved statistics, partial gradient masks, bad inputs, the module's parameters.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "layers/norm/layernorm.h"
#include "layers/norm/layernorm_op.h"

using namespace hyb;

namespace {

struct DirectLayerNorm {
  std::vector<double> y, mean, rstd;
};

// y = w (x - mean) / sqrt(var + eps) + b row by row, mean first, then the biased variance around it.
DirectLayerNorm direct_layernorm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector(), bv = b.to_double_vector();
  const size_t C = wv.size(), rows = xv.size() / C;
  DirectLayerNorm out;
  for (size_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (size_t c = 0; c < C; ++c) mu += xv[r * C + c] / double(C);
    for (size_t c = 0; c < C; ++c) var += (xv[r * C + c] - mu) * (xv[r * C + c] - mu) / double(C);
    out.mean.push_back(mu);
    out.rstd.push_back(1 / std::sqrt(var + eps));
    for (size_t c = 0; c < C; ++c) out.y.push_back(wv[c] * (xv[r * C + c] - mu) / std::sqrt(var + eps) + bv[c]);
  }
  return out;
}

}  // namespace

TEST_CASE("layernorm gradients of x, weight and bias match finite differences", "[layernorm][cpu][grad]") {
  for (int64_t C : {5, 37, 256}) {
    DYNAMIC_SECTION("(2, 3, " << C << ")") {
      auto r = gradcheck(
          [](const std::vector<Var>& x) { return std::vector<Var>{layernorm(x[0], x[1], x[2], 1e-5)}; },
          {random_tensor({2, 3, C}, 11, DType::f64, 1.5, 0.7), random_tensor({C}, 12, DType::f64, 0.5, 1.0),
           random_tensor({C}, 13, DType::f64, 0.5)});
      INFO(r.report);
      REQUIRE(r.max_error < 1e-7);
    }
  }
}

TEST_CASE("layernorm equals the direct two-pass formula, with its mean and rstd saved", "[layernorm][cpu]") {
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-13 : 1e-6;
    for (int64_t C : {37, 256}) {
      DYNAMIC_SECTION(dtype_name(dt) << " (5, " << C << ")") {
        const Tensor x = random_tensor({5, C}, 20, dt, 1.5, 0.7);
        const Tensor w = random_tensor({C}, 21, dt, 0.5, 1.0), b = random_tensor({C}, 22, dt, 0.5);
        LayerNormSaved s;
        const Tensor y = layernorm_forward(x, w, b, 1e-5, &s);
        const DirectLayerNorm want = direct_layernorm(x, w, b, 1e-5);
        REQUIRE(y.dtype() == dt);
        REQUIRE(s.mean.shape() == Shape{5});
        REQUIRE(max_rel_error(y.to_double_vector(), want.y, 1.0) < tol);
        REQUIRE(max_rel_error(s.mean.to_double_vector(), want.mean) < tol);
        REQUIRE(max_rel_error(s.rstd.to_double_vector(), want.rstd) < tol);
        REQUIRE(layernorm_forward(x, w, b, 1e-5, nullptr).to_double_vector() == y.to_double_vector());
      }
    }
  }
}

TEST_CASE("layernorm backward asked for one gradient computes the same values as the full backward", "[layernorm][cpu]") {
  const Tensor x = random_tensor({7, 37}, 30, DType::f32, 2.0, -0.4);
  const Tensor w = random_tensor({37}, 31, DType::f32, 0.3, 1.0), b = random_tensor({37}, 32, DType::f32);
  const Tensor dy = random_tensor({7, 37}, 33, DType::f32);
  LayerNormSaved s;
  layernorm_forward(x, w, b, 1e-5, &s);
  const LayerNormGrads all = layernorm_backward(s, dy, GradMask{7});
  const LayerNormGrads dx = layernorm_backward(s, dy, GradMask{1});
  const LayerNormGrads dw = layernorm_backward(s, dy, GradMask{2});
  const LayerNormGrads db = layernorm_backward(s, dy, GradMask{4});
  REQUIRE((!dx.dw.defined() && !dx.db.defined() && !dw.dx.defined() && !dw.db.defined() && !db.dx.defined() &&
           !db.dw.defined()));
  REQUIRE(dx.dx.to_double_vector() == all.dx.to_double_vector());
  REQUIRE(dw.dw.to_double_vector() == all.dw.to_double_vector());
  REQUIRE(db.db.to_double_vector() == all.db.to_double_vector());
  // db is the column sum of dy.
  std::vector<double> col(37, 0.0);
  const std::vector<double> g = dy.to_double_vector();
  for (size_t i = 0; i < g.size(); ++i) col[i % 37] += g[i];
  REQUIRE(max_rel_error(all.db.to_double_vector(), col) < 1e-6);
}

TEST_CASE("layernorm rejects a weight or bias that does not fit x, naming the shapes", "[layernorm][cpu][errors]") {
  const Tensor x = random_tensor({5, 33}, 40, DType::f32);
  const Tensor ok = Tensor::full({33}, 1.0);
  REQUIRE_THROWS_WITH(layernorm_forward(x, Tensor::full({32}, 1.0), ok, 1e-5, nullptr),
                      Catch::Contains("layernorm") && Catch::Contains("(5, 33)") && Catch::Contains("(32,)"));
  REQUIRE_THROWS_WITH(layernorm_forward(x, ok, Tensor::full({3, 11}, 0.0), 1e-5, nullptr),
                      Catch::Contains("layernorm") && Catch::Contains("(3, 11)"));
  REQUIRE_THROWS_WITH(layernorm_forward(x, ok, Tensor::full({33}, 0.0, DType::f64), 1e-5, nullptr),
                      Catch::Contains("layernorm") && Catch::Contains("f64"));
}

TEST_CASE("the LayerNorm module has weight 1 and bias 0, outside weight decay, and trains both", "[layernorm][cpu]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  LayerNorm norm(37, 1e-5);
  norm.initialize(1);
  std::vector<std::string> names;
  for (const auto& p : norm.named_parameters()) {
    names.push_back(p.name);
    REQUIRE(!p.decay);
    REQUIRE(p.var.shape() == Shape{37});
    const std::vector<double> v = p.var.data().to_double_vector();
    REQUIRE(v == std::vector<double>(37, p.name == "weight" ? 1.0 : 0.0));
  }
  REQUIRE(names == std::vector<std::string>{"weight", "bias"});
  std::vector<Var> leaves;
  for (const auto& p : norm.named_parameters()) leaves.push_back(p.var);
  const Tensor x = random_tensor({3, 37}, 50, DType::f64, 1.5, 0.7);
  auto r = gradcheck_leaves([&] { return std::vector<Var>{norm.forward(Var(x))}; }, leaves, names);
  INFO(r.report);
  REQUIRE(r.max_error < 1e-7);
}
