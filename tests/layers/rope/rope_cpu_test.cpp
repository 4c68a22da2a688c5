// Rotate-half RoPE on the CPU: the identities of attention.md 9.8, partial rotary, the fp64
// angles of the f32 table, Llama-3 scaling, gradients and bad inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "layers/rope/rope_op.h"

using namespace hyb;

namespace {

double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

// Meta's interleaved convention: pairs (2i, 2i + 1), same angles; (B, T, H, D) f64, full rotary.
Tensor rope_interleaved(const Tensor& x, const std::vector<double>& inv_freq) {
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  std::vector<double> in = x.to_double_vector(), out(in.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const size_t at = size_t(((b * T + t) * H + h) * D + 2 * i);
          const double a = double(t) * inv_freq[size_t(i)];
          out[at] = in[at] * std::cos(a) - in[at + 1] * std::sin(a);
          out[at + 1] = in[at] * std::sin(a) + in[at + 1] * std::cos(a);
        }
  return Tensor::from_vector(out, x.shape());
}

// The Hugging Face converter's row permutation: Meta row 2i + c becomes row c D/2 + i.
Tensor permute_meta_to_half(const Tensor& x) {
  const int64_t D = x.size(3), rows = x.numel() / D;
  std::vector<double> in = x.to_double_vector(), out(in.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < D / 2; ++i)
      for (int64_t c = 0; c < 2; ++c) out[size_t(r * D + c * D / 2 + i)] = in[size_t(r * D + 2 * i + c)];
  return Tensor::from_vector(out, x.shape());
}

}  // namespace

TEST_CASE("rope at position zero is the identity", "[rope][cpu]") {
  const RopeTable tab = rope_table(10000.0, 10, 16, std::nullopt, Device::cpu());
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = random_tensor({3, 1, 4, 10}, 1, dt);
    REQUIRE(rel_error(rope_forward(x, tab, 0), x) == 0.0);
  }
}

TEST_CASE("rope preserves the norm of every head vector", "[rope][cpu]") {
  const RopeTable tab = rope_table(500000.0, 12, 128, std::nullopt, Device::cpu());
  Tensor x = random_tensor({2, 37, 3, 12}, 2);
  Tensor y = rope_forward(x, tab, 50);
  REQUIRE(rel_error(y, x) > 0.1);
  std::vector<double> xv = x.to_double_vector(), yv = y.to_double_vector();
  for (size_t r = 0; r < xv.size() / 12; ++r) {
    double nx = 0, ny = 0;
    for (size_t d = 0; d < 12; ++d) {
      nx += xv[r * 12 + d] * xv[r * 12 + d];
      ny += yv[r * 12 + d] * yv[r * 12 + d];
    }
    REQUIRE(ny == Approx(nx).epsilon(1e-14));
  }
}

TEST_CASE("rope backward is the transpose of the forward, the rotation by the negative angle", "[rope][cpu]") {
  const RopeTable tab = rope_table(10000.0, 8, 64, std::nullopt, Device::cpu());
  Tensor x = random_tensor({2, 37, 3, 14}, 3), y = random_tensor({2, 37, 3, 14}, 4);
  REQUIRE(dot(rope_forward(x, tab, 5), y) == Approx(dot(x, rope_backward(y, tab, 5))).epsilon(1e-13));
  REQUIRE(rel_error(rope_backward(rope_forward(x, tab, 5), tab, 5), x) < 1e-15);
}

TEST_CASE("rope dot products depend only on the distance between the two positions", "[rope][cpu]") {
  const RopeTable tab = rope_table(10000.0, 16, 32, std::nullopt, Device::cpu());
  Tensor q = random_tensor({1, 1, 2, 16}, 5), k = random_tensor({1, 1, 2, 16}, 6);
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{5, 2}, {0, 9}, {20, 20}}) {
    const double base = dot(rope_forward(q, tab, m), rope_forward(k, tab, n));
    for (int64_t shift : {1, 17, 1000}) {
      INFO("m " << m << " n " << n << " shift " << shift);
      REQUIRE(dot(rope_forward(q, tab, m + shift), rope_forward(k, tab, n + shift)) ==
              Approx(base).epsilon(1e-11));
    }
  }
}

TEST_CASE("rotate-half equals the interleaved convention under the converter's row permutation", "[rope][cpu]") {
  const int64_t D = 12;
  const RopeTable tab = rope_table(10000.0, D, 64, std::nullopt, Device::cpu());
  Tensor x = random_tensor({2, 37, 3, D}, 7);
  Tensor half = rope_forward(permute_meta_to_half(x), tab, 0);
  REQUIRE(rel_error(half, permute_meta_to_half(rope_interleaved(x, tab.inv_freq))) < 1e-15);
  // Without the permutation the two conventions differ.
  REQUIRE(rel_error(rope_forward(x, tab, 0), rope_interleaved(x, tab.inv_freq)) > 0.1);
}

TEST_CASE("partial rotary turns the first rope_dim dims and passes the others through", "[rope][cpu]") {
  const RopeTable tab = rope_table(10000.0, 4, 64, std::nullopt, Device::cpu());
  Tensor x = random_tensor({2, 37, 3, 10}, 8);
  Tensor y = rope_forward(x, tab, 3);
  REQUIRE(rel_error(y.narrow(3, 4, 6).contiguous(), x.narrow(3, 4, 6).contiguous()) == 0.0);
  REQUIRE(rel_error(y.narrow(3, 0, 4).contiguous(), rope_forward(x.narrow(3, 0, 4), tab, 3)) == 0.0);
}

TEST_CASE("rope gradients match finite differences, with partial rotary and an offset", "[rope][cpu][grad]") {
  for (int64_t R : {4, 10}) {
    DYNAMIC_SECTION("R" << R) {
      const RopeTable tab = rope_table(10000.0, R, 64, std::nullopt, Device::cpu());
      auto r = gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{rope(x[0], tab, 7)}; },
                         {random_tensor({2, 13, 3, 10}, 9)});
      INFO(r.report);
      REQUIRE(r.max_error < 1e-6);
    }
  }
}

TEST_CASE("the f32 table holds cos and sin of fp64 angles, also at large positions", "[rope][cpu]") {
  const RopeTable tab = rope_table(10000.0, 64, 16384, std::nullopt, Device::cpu());
  const float* c = tab.cos.data<float>();
  const float* s = tab.sin.data<float>();
  double worst = 0;
  for (int64_t p = 16000; p < 16384; ++p)
    for (int64_t i = 0; i < 32; ++i) {
      const double a = double(p) * tab.inv_freq[size_t(i)];
      worst = std::max(worst, std::abs(double(c[p * 32 + i]) - std::cos(a)));
      worst = std::max(worst, std::abs(double(s[p * 32 + i]) - std::sin(a)));
    }
  // Half an f32 ulp near 1; an fp32 angle (p * inv_f in float) is off by up to ~1e-3 here.
  REQUIRE(worst < 6e-8);
}

TEST_CASE("the f32 path agrees with the f64 path, inside and past the end of the table", "[rope][cpu]") {
  const RopeTable small = rope_table(10000.0, 10, 8, std::nullopt, Device::cpu());
  Tensor x = random_tensor({2, 37, 3, 10}, 10);
  Tensor y64 = rope_forward(x, small, 2);
  Tensor y32 = rope_forward(x.to(DType::f32), small, 2);
  REQUIRE(y32.dtype() == DType::f32);
  REQUIRE(rel_error(y32, y64) < 1e-6);
}

TEST_CASE("llama3 scaling keeps high frequencies, divides low ones by the factor, and is continuous",
          "[rope][cpu]") {
  const double theta = 500000.0;
  const int64_t R = 128;
  const std::vector<double> plain = rope_inv_freq(theta, R, std::nullopt);
  const RopeScaling s{8.0, 1.0, 4.0, 8192};
  const std::vector<double> scaled = rope_inv_freq(theta, R, s);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelength = 2 * std::numbers::pi / plain[i];
    if (wavelength < 8192 / 4.0) {
      REQUIRE(scaled[i] == plain[i]);
      ++kept;
    } else if (wavelength > 8192 / 1.0) {
      REQUIRE(scaled[i] == Approx(plain[i] / 8).epsilon(1e-15));
      ++divided;
    } else {
      REQUIRE(scaled[i] < plain[i]);
      REQUIRE(scaled[i] > plain[i] / 8);
      ++blended;
    }
  }
  REQUIRE(kept > 0);
  REQUIRE(divided > 0);
  REQUIRE(blended > 0);
  // Put each band edge exactly on a frequency: the blend must meet the neighbouring band there.
  const size_t i = 40;
  const double wavelength = 2 * std::numbers::pi / plain[i];
  RopeScaling at_high = s, at_low = s;
  at_high.original_max_position = at_high.high_freq_factor * wavelength;
  at_low.original_max_position = at_low.low_freq_factor * wavelength;
  REQUIRE(rope_inv_freq(theta, R, at_high)[i] == Approx(plain[i]).epsilon(1e-12));
  REQUIRE(rope_inv_freq(theta, R, at_low)[i] == Approx(plain[i] / 8).epsilon(1e-12));
}

TEST_CASE("rope rejects an odd or too large rope_dim and inputs that are not (B, T, H, D)", "[rope][cpu]") {
  REQUIRE_THROWS_WITH(rope_table(10000.0, 5, 8, std::nullopt, Device::cpu()), Catch::Contains("rope_dim") &&
                                                                                   Catch::Contains("even") &&
                                                                                   Catch::Contains("5"));
  const RopeTable tab = rope_table(10000.0, 12, 8, std::nullopt, Device::cpu());
  REQUIRE_THROWS_WITH(rope_forward(random_tensor({2, 3, 4, 10}, 11), tab, 0),
                      Catch::Contains("rope_forward") && Catch::Contains("rope_dim 12") &&
                          Catch::Contains("(2, 3, 4, 10)"));
  REQUIRE_THROWS_WITH(rope_forward(random_tensor({2, 3, 12}, 12), tab, 0), Catch::Contains("(2, 3, 12)"));
  REQUIRE_THROWS_WITH(rope_inv_freq(10000.0, 8, RopeScaling{8.0, 4.0, 1.0, 8192}),
                      Catch::Contains("high_freq_factor"));
}
