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
  // Tails of the packed path: R/2 = 6 and D - R = 2 fit no pack (scalar kernel); D 40 R 32 packs both
  // the rotated and pass-through dims in bf16 and f32; D 36 R 24 packs in f32 only.
  for (auto [D, R] : {std::pair<int64_t, int64_t>{14, 12}, {40, 32}, {36, 24}}) {
    DYNAMIC_SECTION("D " << D << " R " << R << ", 3 x 29 tokens, 5 heads") {
      auto r = cuda_parity(
          [&](const std::vector<Var>& x) {
            RopeTable tab = rope_table(10000.0, R, 100, std::nullopt, x[0].device());
            return std::vector<Var>{rope(x[0], tab, 7)};
          },
          {random_tensor({3, 29, 5, D}, 3)});
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
  // The attention shape (16 heads of 64, full rotary) and an odd head count: a thread rotates two
  // heads with one table load, so 7 heads leave the last slice's second head out.
  for (int64_t H : {16, 7}) {
    DYNAMIC_SECTION("D 64 R 64, 2 x 41 tokens, " << H << " heads") {
      auto r = cuda_parity(
          [&](const std::vector<Var>& x) {
            RopeTable tab = rope_table(10000.0, 64, 100, std::nullopt, x[0].device());
            return std::vector<Var>{rope(x[0], tab, 5)};
          },
          {random_tensor({2, 41, H, 64}, 5)});
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
  // A view 2 floats into each head vector: strides and sizes allow f32 packs but the pointer is 8 bytes
  // off a 16-byte boundary, so the kernel must take its scalar form.
  Tensor wide = random_tensor({2, 37, 3, 36}, 4, DType::f32);
  RopeTable cpu24 = rope_table(10000.0, 24, 64, std::nullopt, Device::cpu());
  RopeTable gpu24 = rope_table(10000.0, 24, 64, std::nullopt, Device::cuda(0));
  Tensor c = rope_forward(wide.narrow(3, 2, 32), cpu24, 3);
  Tensor g = rope_forward(wide.to(Device::cuda(0)).narrow(3, 2, 32), gpu24, 3);
  std::vector<double> cv = c.to_double_vector(), gv = g.to_double_vector();
  for (size_t i = 0; i < cv.size(); ++i) REQUIRE(gv[i] == Approx(cv[i]).margin(1e-5));
}
