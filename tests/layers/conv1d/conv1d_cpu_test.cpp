// The causal depthwise conv + SiLU on the CPU: gradients, the decode identity (a split sequence
// with the cache equals the whole), the kernel alignment, the cache update, bad inputs.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "layers/conv1d/conv1d_op.h"

using namespace hyb;

TEST_CASE("conv1d gradients of x, w, bias and the initial state match finite differences", "[conv1d][cpu][grad]") {
  for (int64_t W : {1, 2, 4}) {
    for (int64_t T : {1, 2, 7}) {
      DYNAMIC_SECTION("W" << W << "-T" << T) {
        const int64_t B = 2, C = 5;
        std::vector<Tensor> in{random_tensor({B, T, C}, 10 + uint64_t(T)), random_tensor({C, W}, 11),
                               random_tensor({C}, 12)};
        if (W > 1) in.push_back(random_tensor({B, W - 1, C}, 13));
        auto r = gradcheck(
            [&](const std::vector<Var>& x) {
              return std::vector<Var>{causal_conv1d_silu(x[0], x[1], x[2], W > 1 ? x[3] : Var())};
            },
            in);
        INFO(r.report);
        REQUIRE(r.max_error < 1e-6);
      }
    }
  }
}

TEST_CASE("conv1d over a sequence equals the conv of its two parts, the second started from the first's cache",
          "[conv1d][cpu]") {
  const int64_t B = 2, T = 13, C = 6, W = 4;
  Tensor x = random_tensor({B, T, C}, 20), w = random_tensor({C, W}, 21), bias = random_tensor({C}, 22);
  const Tensor whole = causal_conv1d_silu_forward(x, w, bias, Tensor(), nullptr);
  for (int64_t split : {0, 1, 2, 3, 9}) {
    DYNAMIC_SECTION("split " << split) {
      Tensor cache = Tensor::zeros({B, W - 1, C}, DType::f64);
      Tensor first = causal_conv1d_silu_forward(x.narrow(1, 0, split), w, bias, cache, nullptr);
      cache = conv1d_next_state(cache, x.narrow(1, 0, split), W);
      Tensor rest = Tensor::empty({B, T - split, C}, DType::f64);
      for (int64_t t = split; t < T; ++t) {  // one token at a time, as decoding does
        rest.narrow(1, t - split, 1).copy_(causal_conv1d_silu_forward(x.narrow(1, t, 1), w, bias, cache, nullptr));
        cache = conv1d_next_state(cache, x.narrow(1, t, 1), W);
      }
      REQUIRE(rel_error(first, whole.narrow(1, 0, split)) < 1e-15);
      REQUIRE(rel_error(rest, whole.narrow(1, split, T - split)) < 1e-15);
      REQUIRE(rel_error(cache, x.narrow(1, T - (W - 1), W - 1)) == 0.0);
    }
  }
}

TEST_CASE("weight index W-1 multiplies the current token: a one-hot kernel at W-1-s shifts by s", "[conv1d][cpu]") {
  const int64_t B = 1, T = 9, C = 3, W = 4;
  Tensor x = random_tensor({B, T, C}, 30);
  const std::vector<double> xv = x.to_double_vector();
  for (int64_t s = 0; s < W; ++s) {
    Tensor w = Tensor::zeros({C, W}, DType::f64);
    for (int64_t c = 0; c < C; ++c) w.data<double>()[c * W + (W - 1 - s)] = 1.0;
    const std::vector<double> y = causal_conv1d_silu_forward(x, w, Tensor(), Tensor(), nullptr).to_double_vector();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const double in = t - s >= 0 ? xv[size_t((t - s) * C + c)] : 0.0;
        REQUIRE(y[size_t(t * C + c)] == Approx(in / (1.0 + std::exp(-in))).epsilon(1e-15).margin(1e-300));
      }
  }
}

TEST_CASE("the conv cache keeps the last W-1 inputs, with the old cache's tail when fewer tokens arrive", "[conv1d][cpu]") {
  const int64_t B = 2, C = 3, W = 4;
  Tensor old = random_tensor({B, W - 1, C}, 40), x = random_tensor({B, 2, C}, 41);
  Tensor next = conv1d_next_state(old, x, W);
  REQUIRE(rel_error(next.narrow(1, 0, 1), old.narrow(1, 2, 1)) == 0.0);
  REQUIRE(rel_error(next.narrow(1, 1, 2), x) == 0.0);
  Tensor fresh = conv1d_next_state(Tensor(), x, W);  // no cache yet: zeros in front
  for (double v : fresh.narrow(1, 0, 1).contiguous().to_double_vector()) REQUIRE(v == 0.0);
}

TEST_CASE("conv1d rejects weights, biases and caches that do not fit x, naming the op and the shapes", "[conv1d][cpu]") {
  Tensor x = random_tensor({2, 5, 4}, 50);
  REQUIRE_THROWS_WITH(causal_conv1d_silu_forward(x, random_tensor({3, 4}, 51), Tensor(), Tensor(), nullptr),
                      Catch::Contains("causal_conv1d_silu_forward") && Catch::Contains("(2, 5, 4)") &&
                          Catch::Contains("(3, 4)"));
  REQUIRE_THROWS_WITH(causal_conv1d_silu_forward(x, random_tensor({4, 4}, 52), random_tensor({5}, 53), Tensor(), nullptr),
                      Catch::Contains("bias is (5,)"));
  REQUIRE_THROWS_WITH(causal_conv1d_silu_forward(x, random_tensor({4, 4}, 52), Tensor(), random_tensor({2, 4, 4}, 54), nullptr),
                      Catch::Contains("x0 is (2, 4, 4)") && Catch::Contains("(2, 3, 4)"));
  REQUIRE_THROWS_WITH(causal_conv1d_silu_forward(x, random_tensor({4, 4}, 52, DType::f32), Tensor(), Tensor(), nullptr),
                      Catch::Contains("dtype"));
}
