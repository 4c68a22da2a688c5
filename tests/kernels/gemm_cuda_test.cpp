// cuBLASLt GEMM against the CPU matmul in f64 on the same (bf16-rounded where bf16) inputs, at sizes that
// are not multiples of any tile, every transpose, batches, a shared 2-D b, views, alpha/beta and the
// bias epilogue. Tagged [gpu]; the test main skips them when no device is visible.
#include <catch2/catch.hpp>

#if HYBRID_CUDA
#include <cmath>
#include <tuple>

#include "autograd/gradcheck.h"
#include "autograd/ops/matmul.h"
#include "core/tensor_math.h"
#include "kernels/gemm_cuda.h"

using namespace hyb;

namespace {

// ||out - ref|| / ||ref||; NaN or inf anywhere makes it infinite.
double rel_error(const Tensor& out, const Tensor& ref) {
  REQUIRE(out.shape() == ref.shape());
  std::vector<double> o = out.to_double_vector(), r = ref.to_double_vector();
  double err = 0, norm = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    if (!std::isfinite(o[i])) return INFINITY;
    err += (o[i] - r[i]) * (o[i] - r[i]);
    norm += r[i] * r[i];
  }
  return std::sqrt(err / norm);
}

double tolerance(DType t) { return t == DType::f64 ? 1e-12 : t == DType::f32 ? 1e-5 : 1e-2; }

Tensor gpu(const Tensor& t) { return t.to(Device::cuda(0)); }
Tensor f64(const Tensor& t) { return t.to(Device::cpu()).to(DType::f64); }

// Random input already in dtype t on the CPU; its f64 copy is exactly what the GPU sees.
Tensor input(const Shape& s, uint64_t seed, DType t) { return random_tensor(s, seed, DType::f64).to(t); }

}  // namespace

TEST_CASE("cuBLASLt matmul matches the f64 cpu reference at odd sizes and every transpose", "[gemm][cuda][gpu]") {
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> sizes = {
      {1, 1, 1}, {1, 7, 129}, {7, 129, 1000}, {129, 1000, 7}, {1000, 1, 129}, {1000, 129, 1000}, {129, 1000, 1000}};
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (auto [M, N, K] : sizes)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
          DYNAMIC_SECTION(dtype_name(dt) << " M" << M << " N" << N << " K" << K << " ta" << ta << " tb" << tb) {
            Tensor a = input(ta ? Shape{K, M} : Shape{M, K}, 1, dt), b = input(tb ? Shape{N, K} : Shape{K, N}, 2, dt);
            Tensor ref = matmul_forward(f64(a), f64(b), ta, tb);
            Tensor c = matmul_forward(gpu(a), gpu(b), ta, tb);
            REQUIRE(c.is_cuda());
            REQUIRE(c.dtype() == dt);
            REQUIRE(rel_error(c, ref) < tolerance(dt));
          }
        }
}

TEST_CASE("batched cuBLASLt matmul matches the cpu for every transpose", "[gemm][cuda][gpu]") {
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [M, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{7, 129, 33}, {1, 1000, 7}, {129, 1, 1000}})
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
          DYNAMIC_SECTION(dtype_name(dt) << " 2x3 batches M" << M << " N" << N << " K" << K << " ta" << ta << " tb" << tb) {
            Tensor a = input(ta ? Shape{2, 3, K, M} : Shape{2, 3, M, K}, 3, dt);
            Tensor b = input(tb ? Shape{2, 3, N, K} : Shape{2, 3, K, N}, 4, dt);
            Tensor ref = matmul_forward(f64(a), f64(b), ta, tb);
            REQUIRE(rel_error(matmul_forward(gpu(a), gpu(b), ta, tb), ref) < tolerance(dt));
          }
        }
}

TEST_CASE("a shared 2-D b is folded into the rows of a batched a", "[gemm][cuda][gpu]") {
  for (DType dt : {DType::f32, DType::bf16})
    for (int tb = 0; tb < 2; ++tb) {
      DYNAMIC_SECTION(dtype_name(dt) << " tb" << tb) {
        const int64_t M = 129, N = 7, K = 1000;
        Tensor a = input({2, 3, M, K}, 5, dt), b = input(tb ? Shape{N, K} : Shape{K, N}, 6, dt);
        Tensor ref = matmul_forward(f64(a), f64(b), false, tb);
        REQUIRE(rel_error(matmul_forward(gpu(a), gpu(b), false, tb), ref) < tolerance(dt));
        // a given as a transposed view is copied before folding; the result is the same.
        Tensor at = gpu(a).transpose(-1, -2).contiguous().transpose(-1, -2);
        REQUIRE_FALSE(at.is_contiguous());
        REQUIRE(rel_error(matmul_forward(at, gpu(b), false, tb), ref) < tolerance(dt));
      }
    }
}

TEST_CASE("transposed and strided views are read in place or copied, with the same result", "[gemm][cuda][gpu]") {
  const int64_t M = 129, N = 33, K = 1000;
  Tensor a = input({M, K}, 7, DType::f32), b = input({K, N}, 8, DType::f32);
  Tensor ref = matmul_forward(f64(a), f64(b));
  // A transposed view of a contiguous matrix: passed to cuBLASLt as the opposite transpose flag.
  Tensor a_view = gpu(a.transpose(0, 1).contiguous()).transpose(0, 1);
  Tensor b_view = gpu(b.transpose(0, 1).contiguous()).transpose(0, 1);
  REQUIRE(rel_error(matmul_forward(a_view, b_view), ref) < 1e-5);
  // Every other column of a wider matrix: not expressible as a leading dimension, so copied.
  Tensor wide = input({M, 2 * K}, 9, DType::f32);
  Tensor a_strided = gpu(wide).slice(1, 0, 2 * K, 2);
  REQUIRE(rel_error(matmul_forward(a_strided, gpu(b)), matmul_forward(f64(wide.slice(1, 0, 2 * K, 2)), f64(b))) < 1e-5);
  // A matrix that starts 4 bytes into its storage: the alignment cuBLASLt is promised drops to match.
  Tensor a_off = gpu(input({M * K + 1}, 10, DType::f32)).narrow(0, 1, M * K).view({M, K});
  REQUIRE(rel_error(matmul_forward(a_off, gpu(b)), matmul_forward(f64(a_off), f64(b))) < 1e-5);
}

TEST_CASE("alpha and beta scale the product and accumulate into c, and a poisoned c is overwritten", "[gemm][cuda][gpu]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      const int64_t M = 7, N = 129, K = 1000;
      Tensor a = input({M, K}, 11, dt), b = input({N, K}, 12, dt), c0 = input({M, N}, 13, dt);
      Tensor c = gpu(c0);
      matmul_into(c, gpu(a), gpu(b), false, true, 0.5, -2.0);
      Tensor ref = matmul_forward(f64(a), f64(b), false, true);
      scale_(ref, 0.5);
      add_(ref, f64(c0), -2.0);
      REQUIRE(rel_error(c, ref) < tolerance(dt));
      // beta = 0 must not read c: NaN in it may not leak into the result.
      Tensor poisoned = Tensor::full({M, N}, NAN, dt, Device::cuda(0));
      matmul_into(poisoned, gpu(a), gpu(b), false, true);
      REQUIRE(rel_error(poisoned, matmul_forward(f64(a), f64(b), false, true)) < tolerance(dt));
    }
  }
}

TEST_CASE("an empty inner dimension leaves beta times c, or the bias", "[gemm][cuda][gpu]") {
  Tensor a = Tensor::empty({7, 0}, DType::f32, Device::cuda(0)), b = Tensor::empty({0, 5}, DType::f32, Device::cuda(0));
  Tensor c0 = input({7, 5}, 14, DType::f32);
  Tensor c = gpu(c0);
  matmul_into_cuda(c, a, b, false, false, 1, 7, 5, 0, false, 1.0, 0.5);
  Tensor ref = f64(c0);
  scale_(ref, 0.5);
  REQUIRE(rel_error(c, ref) < 1e-7);
  Tensor bias = input({5}, 15, DType::f32);
  matmul_bias_into_cuda(c, a, b, gpu(bias), false, false, 1, 7, 5, 0, false);
  std::vector<double> cv = c.to_double_vector(), bv = bias.to_double_vector();
  for (size_t i = 0; i < cv.size(); ++i) REQUIRE(cv[i] == bv[i % 5]);
}

TEST_CASE("the bias epilogue adds an f32 bias to every row of a bf16 or f32 product", "[gemm][cuda][gpu]") {
  for (DType dt : {DType::bf16, DType::f32})
    for (DType bias_dt : {DType::f32, dt}) {
      DYNAMIC_SECTION(dtype_name(dt) << " out, " << dtype_name(bias_dt) << " bias") {
        // Linear's layout: x (B, T, C) times w (N, C)^T, w shared by every batch.
        const int64_t B = 2, T = 65, C = 1000, N = 129;
        Tensor x = input({B, T, C}, 16, dt), w = input({N, C}, 17, dt), bias = input({N}, 18, bias_dt);
        Tensor y = Tensor::full({B, T, N}, NAN, dt, Device::cuda(0));
        matmul_bias_into_cuda(y, gpu(x), gpu(w), gpu(bias), false, true, B, T, N, C, true);
        Tensor ref = matmul_forward(f64(x), f64(w), false, true);
        add_(ref.view({B * T, N}), f64(bias).unsqueeze(0).as_strided({B * T, N}, {0, 1}, 0).contiguous(), 1.0);
        REQUIRE(rel_error(y, ref) < tolerance(dt));
      }
    }
}

TEST_CASE("cuda matmul refuses integer tensors and names the shapes", "[gemm][cuda][gpu][errors]") {
  Tensor a = Tensor::zeros({3, 4}, DType::i32, Device::cuda(0)), b = Tensor::zeros({4, 5}, DType::i32, Device::cuda(0));
  REQUIRE_THROWS_WITH(matmul_forward(a, b), Catch::Contains("matmul_into_cuda: i32 a (3, 4) b (4, 5) -> c (3, 5)") &&
                                                Catch::Contains("dtype must be f32, bf16 or f64"));
  Tensor x = gpu(input({3, 4}, 19, DType::bf16)), w = gpu(input({5, 4}, 20, DType::bf16));
  Tensor y = Tensor::empty({3, 5}, DType::bf16, Device::cuda(0));
  REQUIRE_THROWS_WITH(matmul_bias_into_cuda(y, x, w, gpu(input({4}, 21, DType::f32)), false, true, 1, 3, 5, 4, false),
                      Catch::Contains("matmul_bias_into_cuda") && Catch::Contains("bias must be a contiguous (5,)"));
}

#endif  // HYBRID_CUDA
