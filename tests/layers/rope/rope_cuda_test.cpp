#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/rope/rope_op.h"
#include "parity.h"

using namespace hyb;

TEST_CASE("rope on cuda matches the cpu reference, full and partial rotary, strided input", "[rope][gpu]") {
  for (int64_t R : {32, 16}) {
    DYNAMIC_SECTION("D 32 R " << R) {
      auto r = cuda_parity(
          [&](const std::vector<Var>& x) {
            RopeTable tab = rope_table(10000.0, R, 200, std::nullopt, x[0].device());
            return std::vector<Var>{rope(x[0], tab, 13)};
          },
          {random_tensor({2, 37, 3, 32}, 1)});
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
  Tensor qkv = random_tensor({2, 37, 5, 32}, 2, DType::f32);
  Tensor q = qkv.narrow(2, 1, 3);  // a strided view, as from a fused projection
  RopeTable cpu = rope_table(10000.0, 32, 64, std::nullopt, Device::cpu());
  RopeTable gpu = rope_table(10000.0, 32, 64, std::nullopt, Device::cuda(0));
  Tensor a = rope_forward(q, cpu, 0), b = rope_forward(qkv.to(Device::cuda(0)).narrow(2, 1, 3), gpu, 0);
  std::vector<double> av = a.to_double_vector(), bv = b.to_double_vector();
  for (size_t i = 0; i < av.size(); ++i) REQUIRE(bv[i] == Approx(av[i]).margin(1e-5));
}
