#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/loss/cross_entropy_op.h"
#include "parity.h"

using namespace hyb;

TEST_CASE("cross-entropy on cuda matches the cpu reference with ignored rows and padded columns", "[cross_entropy][gpu]") {
  std::vector<int32_t> t;
  for (int i = 0; i < 97; ++i) t.push_back(i % 11 == 0 ? -1 : (i * 37) % 1000);
  Tensor targets = Tensor::from_vector<int32_t>(t, {97});
  auto r = cuda_parity(
      [&](const std::vector<Var>& x) { return std::vector<Var>{cross_entropy(x[0], targets.to(x[0].device()), 1000, -1)}; },
      {random_tensor({97, 1024}, 1, DType::f64, 3.0)});
  INFO(r.report);
  REQUIRE(r.ok);
}

TEST_CASE("cross-entropy on cuda reports the argmax and lse of every row", "[cross_entropy][gpu]") {
  Tensor z = random_tensor({64, 777}, 2, DType::f32, 2.0);
  Tensor targets = Tensor::from_vector<int32_t>(std::vector<int32_t>(64, 5), {64});
  auto cpu = cross_entropy_forward(z, targets, 777, -1);
  auto gpu = cross_entropy_forward(z.to(Device::cuda(0)), targets.to(Device::cuda(0)), 777, -1);
  REQUIRE(gpu.argmax.to_double_vector() == cpu.argmax.to_double_vector());
  std::vector<double> a = gpu.lse.to_double_vector(), b = cpu.lse.to_double_vector();
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).epsilon(1e-5));
}
