#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/mlp/mlp.h"
#include "layers/linear/linear_op.h"
#include "layers/mlp/swiglu_op.h"

using namespace hyb;

TEST_CASE("swiglu gradients match finite differences", "[swiglu][cpu][grad]") {
  auto r = gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{swiglu(x[0], x[1])}; },
                     {random_tensor({3, 17}, 31, DType::f64, 2.0), random_tensor({3, 17}, 32)});
  INFO(r.report);
  REQUIRE(r.max_error < 1e-7);
}

TEST_CASE("the SwiGLU MLP module's gradients match finite differences for every parameter", "[mlp][cpu][grad]") {
  SwigluMlp mlp(6, 16, 0.5, 0.3);
  mlp.initialize(5);
  auto params = mlp.named_parameters();
  REQUIRE(params.size() == 3);
  REQUIRE(params[0].name == "gate_proj.weight");
  REQUIRE(params[2].name == "down_proj.weight");
  REQUIRE(params[2].var.shape() == Shape{6, 16});
  std::vector<Tensor> inputs{random_tensor({2, 3, 6}, 33)};
  for (auto& p : params) inputs.push_back(p.var.data().to(DType::f64));
  auto r = gradcheck(
      [&](const std::vector<Var>& x) {
        Var h = swiglu(linear(x[0], x[1]), linear(x[0], x[2]));
        return std::vector<Var>{linear(h, x[3])};
      },
      inputs);
  INFO(r.report);
  REQUIRE(r.max_error < 1e-7);
}
