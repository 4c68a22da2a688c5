#include <algorithm>
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/loss/cross_entropy_op.h"
#include "parity.h"

using namespace hyb;

TEST_CASE("cross-entropy on cuda matches the cpu reference with ignored rows and padded columns", "[cross_entropy][gpu]") {
  // (vocab, padded width): 1000 of 1024 packs whole; 997 of 1000 packs with a 5-column (bf16) / 1-column
  // (f32) scalar tail below vocab; 1003 of 1003 is no multiple of a pack (scalar kernel).
  for (auto [vocab, Vp] : {std::pair<int32_t, int64_t>{1000, 1024}, {997, 1000}, {1003, 1003}}) {
    DYNAMIC_SECTION("vocab " << vocab << " of " << Vp) {
      std::vector<int32_t> t;
      for (int i = 0; i < 97; ++i) t.push_back(i % 11 == 0 ? -1 : (i * 37) % vocab);
      t[5] = vocab - 1;  // a target in the scalar tail
      Tensor targets = Tensor::from_vector<int32_t>(t, {97});
      auto r = cuda_parity(
          [&](const std::vector<Var>& x) { return std::vector<Var>{cross_entropy(x[0], targets.to(x[0].device()), vocab, -1)}; },
          {random_tensor({97, Vp}, 1, DType::f64, 3.0)});
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
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

TEST_CASE("cross-entropy on cuda: argmax takes the first column of a tie, packed and scalar", "[cross_entropy][gpu]") {
  // Each row holds its max twice, at columns that fall in different packs, in one pack, and in the tail.
  for (int64_t V : {1000, 1003}) {
    DYNAMIC_SECTION("width " << V) {
      Tensor z = random_tensor({6, V}, 3, DType::f32, 1.0);
      std::vector<double> zv = z.to_double_vector();
      const std::pair<int64_t, int64_t> ties[6] = {{3, 900}, {16, 17}, {500, 501}, {0, V - 1}, {257, 2 * 256 + 1}, {V - 3, V - 2}};
      for (int r = 0; r < 6; ++r) zv[r * V + ties[r].first] = zv[r * V + ties[r].second] = 9.0;
      std::vector<float> zf(zv.begin(), zv.end());
      Tensor zt = Tensor::from_vector<float>(zf, {6, V});
      Tensor targets = Tensor::from_vector<int32_t>(std::vector<int32_t>(6, 1), {6});
      auto gpu = cross_entropy_forward(zt.to(Device::cuda(0)), targets.to(Device::cuda(0)), V, -1);
      std::vector<double> am = gpu.argmax.to_double_vector();
      for (int r = 0; r < 6; ++r) REQUIRE(am[r] == double(ties[r].first));
    }
  }
}

TEST_CASE("cross-entropy on cuda tallies counted rows and reports an out-of-range target at count()",
          "[cross_entropy][gpu]") {
  Tensor z = random_tensor({40, 300}, 4, DType::f32, 2.0).to(Device::cuda(0));
  std::vector<int32_t> t(40);
  for (int i = 0; i < 40; ++i) t[size_t(i)] = i % 7 == 0 ? -1 : (i * 13) % 300;
  const auto counted = std::count_if(t.begin(), t.end(), [](int32_t x) { return x != -1; });
  auto ok = cross_entropy_forward(z, Tensor::from_vector<int32_t>(t, {40}).to(Device::cuda(0)), 300, -1);
  REQUIRE(ok.count() == counted);
  t[9] = 300;
  t[22] = -5;
  auto bad = cross_entropy_forward(z, Tensor::from_vector<int32_t>(t, {40}).to(Device::cuda(0)), 300, -1);
  REQUIRE_THROWS_WITH(bad.count(), Catch::Contains("2 targets are outside [0, 300)"));
  Var logits(z, true);
  REQUIRE_THROWS_WITH(cross_entropy(logits, Tensor::from_vector<int32_t>(t, {40}).to(Device::cuda(0)), 300, -1),
                      Catch::Contains("outside [0, 300)"));
}
