// The DSS decode step on CUDA (dss_decode.h, specs/pha.md 4.4): one kernel for n new tokens, taken
// in order inside it. One block per (batch, channel) owns that channel's Ns modes for the whole call:
// each thread keeps kModesPerThread modes (state, decay, C') in registers, so the state is read and
// written once per call, not once per token, and the in-place update needs no atomics. Per token a
// block sum gives Re sum_n C' s (a fixed order: the same inputs give the same bits). State, C' and
// the sums fp32; the decay is f64 and so is the update that uses it (dss_decode.h says why), the new
// state rounded to fp32 at once.
// Grid (B Hs); kThreads threads, mode m on thread m % kThreads, slot m / kThreads; no dynamic smem.
// A prompt runs through the same token loop, n block sums; 4.4's prefill (the convolution, then the
// final state by a Vandermonde GEMM) is not written (docs/layers/pha.md, "Decoding").
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/reduce.cuh"
#include "layers/pha/dss_decode.h"

namespace hyb {
namespace {

constexpr int kThreads = 128;
constexpr int kModesPerThread = 8;
constexpr int kMaxModes = kThreads * kModesPerThread;  // 1024, twice the paper's Ns
static_assert(kThreads % kWarpSize == 0, "block_reduce_sum takes whole warps");

struct DssDecodeArgs {
  const float* v;                    // (B, n, Hs) the normalized input
  const float* d;                    // (Hs,) the skip D
  const double *decay_re, *decay_im;  // (Ns,) e^Lambda
  const float *cbar_re, *cbar_im;    // (Hs, Ns) C'
  float *s_re, *s_im;                // (B, Hs, Ns) the modal state, in place
  float* y;                          // (B, n, Hs)
  int n, Hs, Ns;
};

__global__ void __launch_bounds__(kThreads) dss_decode_kernel(DssDecodeArgs a) {
  const int bc = blockIdx.x, b = bc / a.Hs, c = bc % a.Hs, tid = threadIdx.x;
  float* g_s_re = a.s_re + int64_t(bc) * a.Ns;
  float* g_s_im = a.s_im + int64_t(bc) * a.Ns;
  const float* g_cbar_re = a.cbar_re + int64_t(c) * a.Ns;
  const float* g_cbar_im = a.cbar_im + int64_t(c) * a.Ns;
  // Modes past Ns get decay 0 and C' 0: they add nothing to the sum and are never stored.
  float r_s_re[kModesPerThread], r_s_im[kModesPerThread], r_cr[kModesPerThread], r_ci[kModesPerThread];
  double r_dr[kModesPerThread], r_di[kModesPerThread];
#pragma unroll
  for (int i = 0; i < kModesPerThread; ++i) {
    const int m = tid + i * kThreads;
    const bool on = m < a.Ns;
    r_s_re[i] = on ? g_s_re[m] : 0.f, r_s_im[i] = on ? g_s_im[m] : 0.f;
    r_dr[i] = on ? a.decay_re[m] : 0.0, r_di[i] = on ? a.decay_im[m] : 0.0;
    r_cr[i] = on ? g_cbar_re[m] : 0.f, r_ci[i] = on ? g_cbar_im[m] : 0.f;
  }
  const float dc = a.d[c];
  for (int t = 0; t < a.n; ++t) {
    const int64_t at = (int64_t(b) * a.n + t) * a.Hs + c;
    const float vt = a.v[at];
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < kModesPerThread; ++i) {
      const float re = float(r_dr[i] * r_s_re[i] - r_di[i] * r_s_im[i] + vt);
      const float im = float(r_dr[i] * r_s_im[i] + r_di[i] * r_s_re[i]);
      r_s_re[i] = re, r_s_im[i] = im;
      part += r_cr[i] * re - r_ci[i] * im;
    }
    const float sum = block_reduce_sum(part);
    if (tid == 0) a.y[at] = sum + dc * vt;
  }
#pragma unroll
  for (int i = 0; i < kModesPerThread; ++i) {
    const int m = tid + i * kThreads;
    if (m < a.Ns) g_s_re[m] = r_s_re[i], g_s_im[m] = r_s_im[i];
  }
}

}  // namespace

Tensor dss_decode_step_cuda(const Tensor& v0, const Tensor& d0, DssDecodeState& st) {
  const char* op = "dss_decode_step_cuda";
  check_dss_decode(v0, d0, st);
  HYB_CHECK(v0.dtype() == DType::f32, op, ": the CUDA path computes in f32 (specs/pha.md 4.4), got ",
            dtype_name(v0.dtype()));
  const Tensor v = v0.contiguous(), d = d0.contiguous();
  const int64_t B = v.size(0), n = v.size(1), Hs = v.size(2), Ns = st.s_re.size(2);
  HYB_CHECK(Ns <= kMaxModes, op, ": Ns = ", Ns, " modes; the kernel keeps at most ", kMaxModes,
            " per channel in registers");
  HYB_CHECK(B * Hs <= INT32_MAX && n <= INT32_MAX, op, ": v is ", shape_str(v.shape()),
            "; B Hs and n must fit the grid's int range");
  const Device dev = v.device();
  Tensor y = Tensor::empty(v.shape(), DType::f32, dev);
  DssDecodeArgs a{v.data<float>(),
                  d.data<float>(),
                  st.modes.decay_re.data<double>(),
                  st.modes.decay_im.data<double>(),
                  st.modes.cbar_re.data<float>(),
                  st.modes.cbar_im.data<float>(),
                  st.s_re.data<float>(),
                  st.s_im.data<float>(),
                  y.data<float>(),
                  int(n),
                  int(Hs),
                  int(Ns)};
  const dim3 grid(unsigned(B * Hs));
  dss_decode_kernel<<<grid, kThreads, 0, current_stream(dev.index)>>>(a);
  HYB_CUDA_LAUNCH_CHECK("dss_decode_kernel", grid, kThreads, 0);
  return y;
}

}  // namespace hyb
