// PHA's mixing op (pha.md 6, 14 item 4): weights on the simplex, equal logits averaging, softplus
// not shift-invariant, and the hand-written backward (6.3) against f64 central differences.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/pha/pha_mix_op.h"

using namespace hyb;

TEST_CASE("pha_mix weights sum to 1, equal logits give the mean of the branches, and a shift of every logit changes w",
          "[pha_mix][cpu]") {
  const Tensor p = Tensor::from_vector(std::vector<double>{0.3, -1.2, 2.0}, {3});
  const std::vector<double> w = pha_mix_weights(p);
  REQUIRE(w[0] + w[1] + w[2] == Approx(1.0).epsilon(1e-15));
  REQUIRE(w[2] > w[0]);
  REQUIRE(w[0] > w[1]);
  const Tensor shifted = Tensor::from_vector(std::vector<double>{1.3, -0.2, 3.0}, {3});
  REQUIRE(std::abs(pha_mix_weights(shifted)[1] - w[1]) > 1e-3);

  std::vector<Tensor> n;
  for (uint64_t k = 0; k < 3; ++k) n.push_back(random_tensor({2, 5, 7}, 10 + k));
  const Tensor eq = Tensor::full({3}, 0.4, DType::f64);
  const Tensor m = pha_mix_forward(n, eq, nullptr);
  for (int64_t e = 0; e < m.numel(); ++e) {
    const double mean = (n[0].data<double>()[e] + n[1].data<double>()[e] + n[2].data<double>()[e]) / 3;
    REQUIRE(m.data<double>()[e] == Approx(mean).margin(1e-15));
  }
}

TEST_CASE("pha_mix gradients of every branch and the logits match finite differences for 2 and 3 branches",
          "[pha_mix][cpu]") {
  for (int k : {2, 3}) {
    DYNAMIC_SECTION(k << " branches") {
      std::vector<Tensor> inputs;
      for (int i = 0; i < k; ++i) inputs.push_back(random_tensor({3, 4, 6}, 20 + uint64_t(i)));
      inputs.push_back(random_tensor({k}, 30, DType::f64, 1.5));
      auto r = gradcheck(
          [k](const std::vector<Var>& x) {
            return std::vector<Var>{pha_mix(std::vector<Var>(x.begin(), x.begin() + k), x[size_t(k)])};
          },
          inputs);
      INFO(r.report);
      REQUIRE(r.max_error < 1e-8);
    }
  }
}
