// CUDA DSS convolution (dss_op.h; specs/pha.md 4.5, 4.6; docs/layers/pha.md "DSS convolution"), fp32
// activations with the kernel basis S built in fp64 and cast once. Forward: K^T = [Re C' | -Im C'] @
// [Re S; Im S] (one GEMM), then an FFT convolution of length n = dss_fft_length(T) through cuFFT (R2C,
// pointwise product, C2R). Backward: the two correlations of 4.6 in frequency space, then g_C' and
// the lag moment M from one GEMM against the same basis, and the per-mode sums over channels.
// The basis is stored with n columns, zero from T on: the GEMM then writes K^T already zero-padded
// for the R2C, and the backward GEMM ignores the wrapped lags >= T of the correlation without a crop.
// Layouts: v, y, dy (B, T, Hs); padded time-major rows (B, Hs, n) f32; spectra (rows, n/2 + 1) complex.
#include <cufft.h>

#include <map>
#include <mutex>

#include "autograd/ops/matmul.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "layers/pha/dss_mode.h"
#include "layers/pha/dss_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;         // transpose tiles: 32 time steps x 32 channels
constexpr int kTileRows = 8;      // transpose blocks: 32 x 8 threads, 4 tile rows each
constexpr int kModeLanes = 32;    // parameter backward: modes per block (threadIdx.x)
constexpr int kChannelRows = 8;   // parameter backward: channel strides per block (threadIdx.y)
static_assert(kTile % kTileRows == 0);

// ---------------------------------------------------------------------------------------------
// cuFFT plans
// ---------------------------------------------------------------------------------------------

const char* cufft_result_name(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "unknown cufftResult";
  }
}

struct FftKey {
  int device;
  cufftType type;
  int64_t n, batch;
  auto operator<=>(const FftKey&) const = default;
};

const char* fft_name(cufftType t) { return t == CUFFT_R2C ? "R2C" : "C2R"; }

// "dss_forward_cuda: cufftExecR2C (n 2048, batch 6144, cuda:0) failed: CUFFT_EXEC_FAILED"
void cufft_check(cufftResult r, const char* call, const char* op, const FftKey& k) {
  HYB_CHECK(r == CUFFT_SUCCESS, op, ": ", call, " (", fft_name(k.type), " n ", k.n, ", batch ", k.batch, ", cuda:",
            k.device, ") failed: ", cufft_result_name(r), " (", int(r), ")");
}

struct FftPlan {
  cufftHandle handle = 0;
  size_t work_bytes = 0;
};

// One plan per (device, direction, n, batch) seen, kept for the process like the GEMM plans (destroying
// them at exit races the driver's teardown). A training run sees a handful. Plans are made without
// their own work area, so a cached plan holds only its twiddle tables; each call takes a work area
// from the caching allocator, freed once the transform is queued: every later user of that memory
// runs after it on the same compute stream. The mutex covers lookup, work area, stream and launch,
// because a plan's work area and stream are state of the shared handle.
struct FftCache {
  std::mutex mutex;
  std::map<FftKey, FftPlan> plans;
};

FftCache& fft_cache() {
  static FftCache* cache = new FftCache;
  return *cache;
}

FftPlan make_fft_plan(const FftKey& k, const char* op) {
  CudaDeviceGuard guard(k.device);
  FftPlan p;
  cufft_check(cufftCreate(&p.handle), "cufftCreate", op, k);
  cufft_check(cufftSetAutoAllocation(p.handle, 0), "cufftSetAutoAllocation", op, k);
  long long n = k.n;
  // Null embeddings: the basic layout, rows of n reals and n/2 + 1 complex values, back to back.
  cufft_check(cufftMakePlanMany64(p.handle, 1, &n, nullptr, 1, 0, nullptr, 1, 0, k.type, k.batch, &p.work_bytes),
              "cufftMakePlanMany64", op, k);
  return p;
}

// R2C: in (batch, n) f32 -> out (batch, n/2 + 1, 2). C2R: in (batch, n/2 + 1, 2) -> out (batch, n) f32,
// unnormalized, and it overwrites its input (cuFFT's multi-dimensional C2R may; we never reread it).
void run_fft(cufftType type, int64_t n, int64_t batch, const Tensor& in, const Tensor& out, const char* op) {
  const int device = in.device().index;
  const FftKey key{device, type, n, batch};
  FftCache& cache = fft_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) it = cache.plans.emplace(key, make_fft_plan(key, op)).first;
  const FftPlan& plan = it->second;
  Tensor work;
  if (plan.work_bytes > 0)
    work = Tensor::empty({int64_t((plan.work_bytes + sizeof(float) - 1) / sizeof(float))}, DType::f32, in.device());
  CudaDeviceGuard guard(device);
  cufft_check(cufftSetWorkArea(plan.handle, work.defined() ? work.raw_data() : nullptr), "cufftSetWorkArea", op, key);
  cufft_check(cufftSetStream(plan.handle, current_stream(device)), "cufftSetStream", op, key);
  if (type == CUFFT_R2C)
    cufft_check(cufftExecR2C(plan.handle, static_cast<cufftReal*>(in.raw_data()), static_cast<cufftComplex*>(out.raw_data())),
                "cufftExecR2C", op, key);
  else
    cufft_check(cufftExecC2R(plan.handle, static_cast<cufftComplex*>(in.raw_data()), static_cast<cufftReal*>(out.raw_data())),
                "cufftExecC2R", op, key);
}

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

// The kernel parameters, f32 on the device, as every parameter-side kernel reads them.
struct DssParams {
  const float *lre, *lim;  // (Ns,)
  const float *cre, *cim;  // (Hs, Ns)
  int64_t Hs, Ns;
  bool imag_exp;
};

// coeff (Hs, 2 Ns) = [Re C' | -Im C'], C' = C Bz with Bz in fp64 (dss_mode.h). One thread per (c, n).
__global__ void dss_forward_coeff_kernel(DssParams p, float* __restrict__ coeff) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.Hs * p.Ns) return;
  const int64_t c = i / p.Ns, n = i % p.Ns;
  const DssMode m = dss_mode(p.lre[n], p.lim[n], p.imag_exp);
  const Cd cbar = cd_mul({p.cre[i], p.cim[i]}, m.bz);
  coeff[c * 2 * p.Ns + n] = float(cbar.re);
  coeff[c * 2 * p.Ns + p.Ns + n] = float(-cbar.im);
}

// basis (2 Ns, n) = [Re S; Im S], S[m, l] = exp(l Lambda_m) in fp64 for l < T, zero for T <= l < n.
// Grid (ceil(n / 256), Ns), a thread per lag: coalesced rows.
__global__ void dss_forward_basis_kernel(DssParams p, float* __restrict__ basis, int64_t T, int64_t n) {
  const int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (l >= n) return;
  Cd s{0, 0};
  if (l < T) s = dss_power(dss_lambda(p.lre[m], p.lim[m], p.imag_exp), l);
  basis[m * n + l] = float(s.re);
  basis[(p.Ns + m) * n + l] = float(s.im);
}

// dst (B, Hs, n) = src (B, T, Hs) transposed, zero for t >= T: the R2C input of v or dy.
// Grid (ceil(n / 32), ceil(Hs / 32), B), block 32 x 8; a 32 x 33 fp32 tile (padded against bank
// conflicts) so both the channel-fastest read and the time-fastest write are coalesced.
__global__ void dss_pad_transpose_kernel(const float* __restrict__ src, float* __restrict__ dst, int64_t T,
                                         int64_t Hs, int64_t n) {
  __shared__ float s_tile[kTile][kTile + 1];  // [t - t0][c - c0]
  const int64_t b = blockIdx.z, t0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {
    const int64_t t = t0 + r, c = c0 + threadIdx.x;
    s_tile[r][threadIdx.x] = t < T && c < Hs ? src[(b * T + t) * Hs + c] : 0.f;
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {
    const int64_t c = c0 + r, t = t0 + threadIdx.x;
    if (c < Hs && t < n) dst[(b * Hs + c) * n + t] = s_tile[threadIdx.x][r];
  }
}

// x_f[row, k] *= scale * K_f[row % Hs, k], or its conjugate: the convolution (forward) or the
// correlation (backward, dv) with the kernel, and the 1/n of the unnormalized inverse. In place.
__global__ void dss_frequency_product_kernel(float2* __restrict__ x_f, const float2* __restrict__ k_f, int64_t rows,
                                             int64_t Hs, int64_t nf, float scale, bool conjugate) {
  const int64_t total = rows * nf;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / nf, k = i % nf;
    const float2 x = x_f[i], kk = k_f[(row % Hs) * nf + k];
    const float kim = conjugate ? -kk.y : kk.y;
    x_f[i] = make_float2(scale * (x.x * kk.x - x.y * kim), scale * (x.x * kim + x.y * kk.x));
  }
}

// out (B, T, Hs) = circ (B, Hs, n) transposed back, first T lags, + d[c] x[b, t, c]: y = K * v + D v
// (forward, x = v) and dv = K (*) dy + D dy (backward, x = dy). Grid (ceil(T / 32), ceil(Hs / 32), B).
__global__ void dss_output_kernel(const float* __restrict__ circ, const float* __restrict__ x,
                                  const float* __restrict__ d, float* __restrict__ out, int64_t T, int64_t Hs,
                                  int64_t n) {
  __shared__ float s_tile[kTile][kTile + 1];  // [c - c0][t - t0]
  const int64_t b = blockIdx.z, t0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {
    const int64_t c = c0 + r, t = t0 + threadIdx.x;
    s_tile[r][threadIdx.x] = c < Hs && t < T ? circ[(b * Hs + c) * n + t] : 0.f;
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {
    const int64_t t = t0 + r, c = c0 + threadIdx.x;
    if (t < T && c < Hs) {
      const int64_t i = (b * T + t) * Hs + c;
      out[i] = s_tile[threadIdx.x][r] + d[c] * x[i];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

// dK_f[c, k] = scale * sum_b conj(v_f[b, c, k]) dy_f[b, c, k]: the batch sum of the dK correlation in
// frequency space, b in order. A thread per (c, k).
__global__ void dss_backward_kernel_spectrum_kernel(const float2* __restrict__ v_f, const float2* __restrict__ dy_f,
                                                    float2* __restrict__ dk_f, int64_t B, int64_t Hs, int64_t nf,
                                                    float scale) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= Hs * nf) return;
  float re = 0.f, im = 0.f;
  for (int64_t b = 0; b < B; ++b) {
    const float2 v = v_f[b * Hs * nf + i], g = dy_f[b * Hs * nf + i];
    re += v.x * g.x + v.y * g.y;
    im += v.x * g.y - v.y * g.x;
  }
  dk_f[i] = make_float2(scale * re, scale * im);
}

// gz (2 Hs, n): rows [0, Hs) hold dK^T from the C2R, lags >= T the wrapped part of the correlation.
// Keeps G = dK^T for l < T in the top half, writes l G in the bottom half, zeroes both from T on, and
// dD[c] = dK[0, c] (lag 0 of the correlation is sum_{b,t} dy v). A thread per (c, l).
__global__ void dss_backward_lag_kernel(float* __restrict__ gz, float* __restrict__ dd, int64_t Hs, int64_t T,
                                        int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= Hs * n) return;
  const int64_t l = i % n;
  const float g = l < T ? gz[i] : 0.f;
  gz[i] = g;
  gz[Hs * n + i] = float(l) * g;
  if (dd && l == 0) dd[i / n] = g;
}

struct ParamBackwardArgs {
  DssParams in;
  const float* p;      // (2 Hs, 2 Ns): gz @ basis^T; top [Re g_C' | -Im g_C'], bottom [Re M | -Im M]
  float *dlre, *dlim;  // (Ns,) or null when not wanted
  float *dcre, *dcim;  // (Hs, Ns) or null when not wanted
};

// 4.6 per mode: g_C = conj(Bz) g_C', g_LambdaS = sum_c conj(C') M, g_Bz = sum_c conj(C) g_C',
// g_Lambda = g_LambdaS + conj(Bz') g_Bz, dl_re = -a Re g_Lambda, dl_im = omega Im g_Lambda (or Im).
// Grid ceil(Ns / 32), block 32 modes x 8 channel rows: loads along modes are coalesced. Channel sums in
// fp64, each thread over c = y, y + 8, ..., then the 8 rows added in order through shared memory.
__global__ void dss_backward_param_kernel(ParamBackwardArgs a) {
  __shared__ double s_sum[4][kChannelRows][kModeLanes];  // Re, Im of g_LambdaS and g_Bz
  const DssParams& q = a.in;
  const int64_t n = int64_t(blockIdx.x) * kModeLanes + threadIdx.x;
  const int64_t twoNs = 2 * q.Ns;
  double acc[4] = {0, 0, 0, 0};
  if (n < q.Ns) {
    const DssMode m = dss_mode(q.lre[n], q.lim[n], q.imag_exp);
    for (int64_t c = threadIdx.y; c < q.Hs; c += kChannelRows) {
      const Cd g_cbar{a.p[c * twoNs + n], -a.p[c * twoNs + q.Ns + n]};
      const Cd moment{a.p[(q.Hs + c) * twoNs + n], -a.p[(q.Hs + c) * twoNs + q.Ns + n]};
      const int64_t i = c * q.Ns + n;
      const Cd C{q.cre[i], q.cim[i]};
      const Cd g_lambda_s = cd_conj_mul(cd_mul(C, m.bz), moment), g_bz = cd_conj_mul(C, g_cbar);
      acc[0] += g_lambda_s.re;
      acc[1] += g_lambda_s.im;
      acc[2] += g_bz.re;
      acc[3] += g_bz.im;
      const Cd g_c = cd_conj_mul(m.bz, g_cbar);
      if (a.dcre) a.dcre[i] = float(g_c.re);
      if (a.dcim) a.dcim[i] = float(g_c.im);
    }
  }
  for (int k = 0; k < 4; ++k) s_sum[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || n >= q.Ns) return;
  double sum[4] = {0, 0, 0, 0};
  for (int r = 0; r < kChannelRows; ++r)
    for (int k = 0; k < 4; ++k) sum[k] += s_sum[k][r][threadIdx.x];
  const DssMode m = dss_mode(q.lre[n], q.lim[n], q.imag_exp);
  const Cd via_bz = cd_conj_mul(m.dbz, {sum[2], sum[3]});
  const Cd g_lambda{sum[0] + via_bz.re, sum[1] + via_bz.im};
  if (a.dlre) a.dlre[n] = float(-m.a * g_lambda.re);
  if (a.dlim) a.dlim[n] = float((q.imag_exp ? m.omega : 1.0) * g_lambda.im);
}

// ---------------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------------

struct DssShape {
  int64_t B, T, Hs, Ns, n, nf;
};

DssShape dss_shape(const DssInputs& in, const char* op) {
  const int64_t n = dss_fft_length(in.v.size(1));
  const DssShape s{in.v.size(0), in.v.size(1), in.v.size(2), in.lambda_re.size(0), n, n / 2 + 1};
  HYB_CHECK(in.v.dtype() == DType::f32, op, ": the CUDA path computes in f32 (specs/pha.md 4.5), got v of dtype ",
            dtype_name(in.v.dtype()), "; cast the DSS input and parameters to f32");
  // Grid limits: B and Ns are grid dimensions y / z.
  HYB_CHECK(s.B <= 65535 && s.Ns <= 65535, op, ": v is ", shape_str(in.v.shape()), " with Ns = ", s.Ns,
            "; the CUDA path takes B <= 65535 and Ns <= 65535");
  return s;
}

int blocks_for(int64_t n) { return int((n + kThreads - 1) / kThreads); }

// The parameters' pointers; the tensors must be contiguous and outlive the launches.
DssParams dss_params(const Tensor& lre, const Tensor& lim, const Tensor& cre, const Tensor& cim, bool imag_exp) {
  return {lre.data<float>(), lim.data<float>(), cre.data<float>(), cim.data<float>(), cre.size(0), cre.size(1), imag_exp};
}

// (B, T, Hs) -> (B, Hs, n) zero-padded, for the R2C.
Tensor pad_transpose(const Tensor& x, const DssShape& s, cudaStream_t stream) {
  Tensor out = Tensor::empty({s.B, s.Hs, s.n}, DType::f32, x.device());
  const dim3 grid(unsigned((s.n + kTile - 1) / kTile), unsigned((s.Hs + kTile - 1) / kTile), unsigned(s.B));
  const dim3 block(kTile, kTileRows);
  dss_pad_transpose_kernel<<<grid, block, 0, stream>>>(x.data<float>(), out.data<float>(), s.T, s.Hs, s.n);
  HYB_CUDA_LAUNCH_CHECK("dss_pad_transpose_kernel", grid, block, 0);
  return out;
}

// x_f *= K_f (or conj), then C2R into circ and out = circ[:, :, :T]^T + d x.
Tensor convolve_with_kernel(const Tensor& x_f, const Tensor& k_f, const Tensor& circ, const Tensor& x, const Tensor& d,
                            bool conjugate, const DssShape& s, const char* op, cudaStream_t stream) {
  const int dev = x.device().index;
  const int64_t rows = s.B * s.Hs;
  const int grid = grid_blocks(rows * s.nf, kThreads, dev);
  dss_frequency_product_kernel<<<grid, kThreads, 0, stream>>>(static_cast<float2*>(x_f.raw_data()),
                                                              static_cast<const float2*>(k_f.raw_data()), rows, s.Hs,
                                                              s.nf, 1.f / float(s.n), conjugate);
  HYB_CUDA_LAUNCH_CHECK("dss_frequency_product_kernel", grid, kThreads, 0);
  run_fft(CUFFT_C2R, s.n, rows, x_f, circ, op);
  Tensor out = Tensor::empty({s.B, s.T, s.Hs}, DType::f32, x.device());
  const dim3 tgrid(unsigned((s.T + kTile - 1) / kTile), unsigned((s.Hs + kTile - 1) / kTile), unsigned(s.B));
  const dim3 block(kTile, kTileRows);
  dss_output_kernel<<<tgrid, block, 0, stream>>>(circ.data<float>(), x.data<float>(), d.data<float>(),
                                                 out.data<float>(), s.T, s.Hs, s.n);
  HYB_CUDA_LAUNCH_CHECK("dss_output_kernel", tgrid, block, 0);
  return out;
}

}  // namespace

Tensor dss_forward_cuda(const DssInputs& in0, DssSaved* saved) {
  const DssShape s = dss_shape(in0, "dss_forward_cuda");
  const DssInputs in{in0.v.contiguous(),    in0.lambda_re.contiguous(), in0.lambda_im.contiguous(),
                     in0.c_re.contiguous(), in0.c_im.contiguous(),      in0.d.contiguous(),
                     in0.lambda_imag_exp};
  const Device dev = in.v.device();
  CudaDeviceGuard guard(dev.index);
  cudaStream_t stream = current_stream(dev.index);

  // 4.5 step 1: the kernel, K^T (Hs, n) = coeff (Hs, 2 Ns) @ basis (2 Ns, n), zero from lag T on.
  const DssParams params = dss_params(in.lambda_re, in.lambda_im, in.c_re, in.c_im, in.lambda_imag_exp);
  Tensor coeff = Tensor::empty({s.Hs, 2 * s.Ns}, DType::f32, dev);
  dss_forward_coeff_kernel<<<blocks_for(s.Hs * s.Ns), kThreads, 0, stream>>>(params, coeff.data<float>());
  HYB_CUDA_LAUNCH_CHECK("dss_forward_coeff_kernel", blocks_for(s.Hs * s.Ns), kThreads, 0);
  Tensor basis = Tensor::empty({2 * s.Ns, s.n}, DType::f32, dev);
  const dim3 bgrid(unsigned(blocks_for(s.n)), unsigned(s.Ns));
  dss_forward_basis_kernel<<<bgrid, kThreads, 0, stream>>>(params, basis.data<float>(), s.T, s.n);
  HYB_CUDA_LAUNCH_CHECK("dss_forward_basis_kernel", bgrid, kThreads, 0);
  Tensor kt = Tensor::empty({s.Hs, s.n}, DType::f32, dev);
  matmul_into(kt, coeff, basis, false, false);

  // Steps 2 to 5: spectra of K and v, their product, the inverse, and y = circ^T / n + D v.
  Tensor k_f = Tensor::empty({s.Hs, s.nf, 2}, DType::f32, dev);
  run_fft(CUFFT_R2C, s.n, s.Hs, kt, k_f, "dss_forward_cuda");
  Tensor v_pad = pad_transpose(in.v, s, stream);
  Tensor v_f = Tensor::empty({s.B, s.Hs, s.nf, 2}, DType::f32, dev);
  run_fft(CUFFT_R2C, s.n, s.B * s.Hs, v_pad, v_f, "dss_forward_cuda");
  // v_pad is spent: it takes the C2R output.
  Tensor y = convolve_with_kernel(v_f, k_f, v_pad, in.v, in.d, false, s, "dss_forward_cuda", stream);
  if (saved) {
    saved->basis = basis;
    saved->kernel_f = k_f;
  }
  return y;
}

DssGrads dss_backward_cuda(const DssSaved& saved, const Tensor& dy0, GradMask needed) {
  const DssShape s = dss_shape(saved.in, "dss_backward_cuda");
  HYB_CHECK(saved.basis.defined() && saved.kernel_f.defined(),
            "dss_backward_cuda: the saved record has no basis or kernel spectrum; the forward did not run on CUDA "
            "with a saved record");
  const DssInputs& in = saved.in;
  const Tensor v = in.v.contiguous(), dy = dy0.contiguous(), d = in.d.contiguous();
  const Device dev = v.device();
  CudaDeviceGuard guard(dev.index);
  cudaStream_t stream = current_stream(dev.index);
  const bool need_kernel = needed[1] || needed[2] || needed[3] || needed[4];
  const bool need_spectrum = need_kernel || needed[5];
  DssGrads g;

  Tensor dy_pad = pad_transpose(dy, s, stream);
  Tensor dy_f = Tensor::empty({s.B, s.Hs, s.nf, 2}, DType::f32, dev);
  run_fft(CUFFT_R2C, s.n, s.B * s.Hs, dy_pad, dy_f, "dss_backward_cuda");

  // dK from the batch-summed cross spectrum; read before the dv product overwrites dy_f.
  Tensor gz;
  if (need_spectrum) {
    Tensor v_pad = pad_transpose(v, s, stream);
    Tensor v_f = Tensor::empty({s.B, s.Hs, s.nf, 2}, DType::f32, dev);
    run_fft(CUFFT_R2C, s.n, s.B * s.Hs, v_pad, v_f, "dss_backward_cuda");
    Tensor dk_f = Tensor::empty({s.Hs, s.nf, 2}, DType::f32, dev);
    dss_backward_kernel_spectrum_kernel<<<blocks_for(s.Hs * s.nf), kThreads, 0, stream>>>(
        static_cast<const float2*>(v_f.raw_data()), static_cast<const float2*>(dy_f.raw_data()),
        static_cast<float2*>(dk_f.raw_data()), s.B, s.Hs, s.nf, 1.f / float(s.n));
    HYB_CUDA_LAUNCH_CHECK("dss_backward_kernel_spectrum_kernel", blocks_for(s.Hs * s.nf), kThreads, 0);
    gz = Tensor::empty({2 * s.Hs, s.n}, DType::f32, dev);
    run_fft(CUFFT_C2R, s.n, s.Hs, dk_f, gz.narrow(0, 0, s.Hs), "dss_backward_cuda");
    if (needed[5]) g.dd = Tensor::empty({s.Hs}, DType::f32, dev);
    dss_backward_lag_kernel<<<blocks_for(s.Hs * s.n), kThreads, 0, stream>>>(
        gz.data<float>(), g.dd.defined() ? g.dd.data<float>() : nullptr, s.Hs, s.T, s.n);
    HYB_CUDA_LAUNCH_CHECK("dss_backward_lag_kernel", blocks_for(s.Hs * s.n), kThreads, 0);
  }

  if (needed[0]) g.dv = convolve_with_kernel(dy_f, saved.kernel_f, dy_pad, dy, d, true, s, "dss_backward_cuda", stream);

  if (need_kernel) {
    // [g_C' ; M] real-ified in one GEMM: (2 Hs, n) @ (2 Ns, n)^T.
    Tensor p = Tensor::empty({2 * s.Hs, 2 * s.Ns}, DType::f32, dev);
    matmul_into(p, gz, saved.basis, false, true);
    const Tensor lre = in.lambda_re.contiguous(), lim = in.lambda_im.contiguous();
    const Tensor cre = in.c_re.contiguous(), cim = in.c_im.contiguous();
    auto want = [&](int bit, const Shape& shape) { return needed[bit] ? Tensor::empty(shape, DType::f32, dev) : Tensor(); };
    g.dlambda_re = want(1, {s.Ns});
    g.dlambda_im = want(2, {s.Ns});
    g.dc_re = want(3, {s.Hs, s.Ns});
    g.dc_im = want(4, {s.Hs, s.Ns});
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; };
    const ParamBackwardArgs args{dss_params(lre, lim, cre, cim, in.lambda_imag_exp), p.data<float>(),
                                 ptr(g.dlambda_re), ptr(g.dlambda_im), ptr(g.dc_re), ptr(g.dc_im)};
    const dim3 grid(unsigned((s.Ns + kModeLanes - 1) / kModeLanes)), block(kModeLanes, kChannelRows);
    dss_backward_param_kernel<<<grid, block, 0, stream>>>(args);
    HYB_CUDA_LAUNCH_CHECK("dss_backward_param_kernel", grid, block, 0);
  }
  return g;
}

}  // namespace hyb
