#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "core/tensor.h"
#include "core/tensor_math.h"

using namespace hyb;

TEST_CASE("a transposed view shares storage and contiguous() copies it in the new order", "[core][tensor]") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor xt = x.transpose(0, 1);
  REQUIRE(xt.shape() == Shape{3, 2});
  REQUIRE(xt.same_storage(x));
  REQUIRE_FALSE(xt.is_contiguous());
  Tensor c = xt.contiguous();
  REQUIRE(c.is_contiguous());
  REQUIRE(c.to_double_vector() == std::vector<double>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("slice, narrow, select and permute index the right elements", "[core][tensor]") {
  Tensor x = random_tensor({4, 5, 6}, 7, DType::f32);
  std::vector<double> v = x.to_double_vector();
  auto at = [&](int64_t i, int64_t j, int64_t k) { return v[size_t((i * 5 + j) * 6 + k)]; };
  Tensor s = x.slice(1, 1, 5, 2);  // j = 1, 3
  REQUIRE(s.shape() == Shape{4, 2, 6});
  std::vector<double> sv = s.contiguous().to_double_vector();
  REQUIRE(sv[size_t((2 * 2 + 1) * 6 + 4)] == at(2, 3, 4));
  Tensor n = x.narrow(2, 2, 3);
  REQUIRE(n.contiguous().to_double_vector()[size_t((3 * 5 + 4) * 3 + 2)] == at(3, 4, 4));
  Tensor sel = x.select(0, -1);
  REQUIRE(sel.shape() == Shape{5, 6});
  REQUIRE(sel.contiguous().to_double_vector()[7] == at(3, 1, 1));
  Tensor p = x.permute({2, 0, 1});
  REQUIRE(p.shape() == Shape{6, 4, 5});
  REQUIRE(p.contiguous().to_double_vector()[size_t((5 * 4 + 1) * 5 + 2)] == at(1, 2, 5));
}

TEST_CASE("reshape views contiguous data and copies strided data", "[core][tensor]") {
  Tensor x = random_tensor({2, 3, 4}, 3, DType::f32);
  Tensor r = x.reshape({6, -1});
  REQUIRE(r.shape() == Shape{6, 4});
  REQUIRE(r.same_storage(x));
  Tensor t = x.transpose(1, 2).reshape({2, 12});
  REQUIRE_FALSE(t.same_storage(x));
  REQUIRE(t.to_double_vector() == x.transpose(1, 2).contiguous().to_double_vector());
  REQUIRE_THROWS_WITH(x.view({5, 5}), Catch::Contains("cannot view (2, 3, 4)"));
  REQUIRE_THROWS_WITH(x.transpose(0, 1).view({6, 4}), Catch::Contains("not contiguous"));
}

TEST_CASE("casting to bf16 rounds to nearest even and back", "[core][tensor]") {
  Tensor x = Tensor::from_vector<float>({1.0f, 1.00390625f, 1.01171875f, -3.5f, 65504.0f}, {5});
  std::vector<double> r = x.to(DType::bf16).to(DType::f32).to_double_vector();
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to the even mantissa (1.0).
  REQUIRE(r[0] == 1.0);
  REQUIRE(r[1] == 1.0);
  REQUIRE(r[2] == 1.015625);
  REQUIRE(r[3] == -3.5);
  REQUIRE(r[4] == 65536.0);
}

TEST_CASE("every dtype converts through copy_", "[core][tensor]") {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64, DType::u16}) {
    Tensor x = Tensor::from_vector<double>({1, 2, 3, 250}, {2, 2});
    Tensor y = x.to(t).to(DType::f64);
    REQUIRE(y.to_double_vector() == x.to_double_vector());
  }
}

TEST_CASE("add_ and scale_ update in place and bump the version", "[core][tensor]") {
  Tensor a = random_tensor({3, 4}, 1, DType::f32);
  Tensor b = random_tensor({3, 4}, 2, DType::f32);
  std::vector<double> av = a.to_double_vector(), bv = b.to_double_vector();
  uint64_t v0 = a.version();
  add_(a, b, 0.5);
  scale_(a, 2.0);
  REQUIRE(a.version() == v0 + 2);
  std::vector<double> r = a.to_double_vector();
  for (size_t i = 0; i < r.size(); ++i) REQUIRE(r[i] == Approx(2 * (av[i] + 0.5 * bv[i])).epsilon(1e-6));
  REQUIRE_THROWS_WITH(add_(a, random_tensor({4, 3}, 1, DType::f32)), Catch::Contains("(3, 4)") && Catch::Contains("(4, 3)"));
}

TEST_CASE("all_finite finds NaN and inf", "[core][tensor]") {
  Tensor a = random_tensor({100}, 3, DType::f32);
  REQUIRE(all_finite(a));
  a.data<float>()[17] = std::numeric_limits<float>::infinity();
  REQUIRE_FALSE(all_finite(a));
  a.data<float>()[17] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_FALSE(all_finite(a));
}

TEST_CASE("a cuda device is refused clearly by a cpu-only build", "[core][tensor]") {
  if (cuda_device_count() > 0) return;
#if !HYBRID_CUDA
  REQUIRE_THROWS_WITH(Tensor::empty({2}, DType::f32, Device::cuda(0)), Catch::Contains("no CUDA backend"));
#endif
  REQUIRE(Device::parse("cuda:3").index == 3);
  REQUIRE_THROWS_WITH(Device::parse("gpu"), Catch::Contains("\"gpu\""));
}
