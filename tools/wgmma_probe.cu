// Checks the claims of kernels/wgmma.cuh on the device before any kernel relies on them: the
// swizzled tile layout, both descriptor orientations, a register A operand and an MN-major operand
// that starts mid-row. One warpgroup multiplies random bf16 matrices; the host compares with fp32.
//   nvcc -O2 -arch=sm_90a -std=c++20 -I. tools/wgmma_probe.cu -o wgmma_probe && ./wgmma_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/wgmma.cuh"

using bf16 = __nv_bfloat16;
namespace wg = hyb::wgmma;

// A0: [64][64] (m x k, K-major); B0: [128][64] (n x k, K-major); A1: [64][128] (m x k, registers);
// B1: [128][64] (k x n, MN-major); A2: [128][64] (k x m, MN-major).
// out0 = A0 B0^T (64 x 128); out1 = A1 B1 (64 x 64); out2 = A2^T B1[:, 32:64] (64 x 32).
__global__ void probe_kernel(const bf16* A0, const bf16* B0, const bf16* A1, const bf16* B1, const bf16* A2,
                             float* out0, float* out1, float* out2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(1024) unsigned char smem[64 * 128 + 3 * 128 * 128];
  unsigned char* sA0 = smem;
  unsigned char* sB0 = sA0 + 64 * 128;
  unsigned char* sB1 = sB0 + 128 * 128;
  unsigned char* sA2 = sB1 + 128 * 128;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  auto put = [&](unsigned char* tile, const bf16* src, int rows) {
    for (int i = tid; i < rows * 64; i += 128)
      *reinterpret_cast<bf16*>(tile + wg::sw128(i / 64, i % 64)) = src[i];
  };
  put(sA0, A0, 64);
  put(sB0, B0, 128);
  put(sB1, B1, 128);
  put(sA2, A2, 128);
  wg::fence_proxy_async();
  __syncthreads();
  const uint32_t a0 = uint32_t(__cvta_generic_to_shared(sA0)), b0 = uint32_t(__cvta_generic_to_shared(sB0));
  const uint32_t b1 = uint32_t(__cvta_generic_to_shared(sB1)), a2 = uint32_t(__cvta_generic_to_shared(sA2));

  float d0[64], d1[32], d2[16];
  uint32_t af[8][4];
  const int r0 = 16 * warp + lane / 4, c0 = 2 * (lane % 4);
  auto pack = [](bf16 lo, bf16 hi) {
    __nv_bfloat162 v(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  };
  for (int kk = 0; kk < 8; ++kk) {
    const bf16* row_lo = A1 + r0 * 128 + 16 * kk + c0;
    const bf16* row_hi = row_lo + 8 * 128;
    af[kk][0] = pack(row_lo[0], row_lo[1]);
    af[kk][1] = pack(row_hi[0], row_hi[1]);
    af[kk][2] = pack(row_lo[8], row_lo[9]);
    af[kk][3] = pack(row_hi[8], row_hi[9]);
  }
  wg::fence();
  for (int kk = 0; kk < 4; ++kk) wg::mma_ss<128, 0, 0>(d0, wg::desc_k(a0, kk), wg::desc_k(b0, kk), kk > 0);
  for (int kk = 0; kk < 8; ++kk) wg::mma_rs<64, 1>(d1, af[kk], wg::desc_mn(b1, kk), kk > 0);
  for (int kk = 0; kk < 8; ++kk) wg::mma_ss<32, 1, 1>(d2, wg::desc_mn(a2, kk), wg::desc_mn(b1 + 64, kk), kk > 0);
  wg::commit();
  wg::wait<0>();
  wg::fence_operands(d0);
  wg::fence_operands(d1);
  wg::fence_operands(d2);
  auto store = [&](float* out, const float* d, int n) {
    for (int i = 0; i < n / 2; ++i) {
      const int row = r0 + 8 * ((i % 4) / 2), col = 8 * (i / 4) + c0 + i % 2;
      out[row * n + col] = d[i];
    }
  };
  store(out0, d0, 128);
  store(out1, d1, 64);
  store(out2, d2, 32);
#endif
}

int main() {
  std::mt19937 g(1234);
  std::normal_distribution<float> nd;
  auto rnd = [&](int n) {
    std::vector<bf16> v(n);
    for (auto& x : v) x = __float2bfloat16(nd(g));
    return v;
  };
  auto A0 = rnd(64 * 64), B0 = rnd(128 * 64), A1 = rnd(64 * 128), B1 = rnd(128 * 64), A2 = rnd(128 * 64);
  auto f = [](bf16 x) { return __bfloat162float(x); };
  std::vector<float> ref0(64 * 128), ref1(64 * 64), ref2(64 * 32);
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < 128; ++n)
      for (int k = 0; k < 64; ++k) ref0[m * 128 + n] += f(A0[m * 64 + k]) * f(B0[n * 64 + k]);
    for (int n = 0; n < 64; ++n)
      for (int k = 0; k < 128; ++k) ref1[m * 64 + n] += f(A1[m * 128 + k]) * f(B1[k * 64 + n]);
    for (int n = 0; n < 32; ++n)
      for (int k = 0; k < 128; ++k) ref2[m * 32 + n] += f(A2[k * 64 + m]) * f(B1[k * 64 + 32 + n]);
  }
  std::vector<bf16*> dev;
  auto up = [&](const std::vector<bf16>& h) {
    bf16* p;
    cudaMalloc(&p, h.size() * 2);
    cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
    return p;
  };
  float* out;
  cudaMalloc(&out, (64 * 128 + 64 * 64 + 64 * 32) * 4);
  cudaMemset(out, 0xff, (64 * 128 + 64 * 64 + 64 * 32) * 4);
  probe_kernel<<<1, 128>>>(up(A0), up(B0), up(A1), up(B1), up(A2), out, out + 64 * 128, out + 64 * 128 + 64 * 64);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("wgmma_probe: %s\n", cudaGetErrorString(err));
    return 1;
  }
  std::vector<float> got(64 * 128 + 64 * 64 + 64 * 32);
  cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost);
  int failures = 0;
  auto check = [&](const char* what, const float* d, const std::vector<float>& ref) {
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = std::fabs(d[i] - ref[i]) / (1.0 + std::fabs(ref[i]));
      worst = std::isfinite(d[i]) ? std::max(worst, e) : INFINITY;
    }
    const bool ok = worst < 1e-4;
    failures += !ok;
    std::printf("%-4s %-52s worst %.2e\n", ok ? "ok" : "FAIL", what, worst);
  };
  check("m64n128 K-major smem x K-major smem (Q K^T)", got.data(), ref0);
  check("m64n64 registers x MN-major smem (P V)", got.data() + 64 * 128, ref1);
  check("m64n32 MN-major smem x MN-major smem at column 32 (dS K)", got.data() + 64 * 128 + 64 * 64, ref2);
  return failures ? 1 : 0;
}
