// Flash-attention kernel experiments, llm.c dev/cuda style: the production kernels (included
// below) and tile variants, checked against a naive fp32 GPU reference on fresh random inputs at
// awkward sizes, then timed with CUDA events at the attention.md 4.5 benchmark shapes.
// Needs nothing but the CUDA toolkit. From the repository root:
//   nvcc -O3 -arch=sm_90a -DHYBRID_SM90A -std=c++20 --expt-relaxed-constexpr -lineinfo -I. tools/flash_attention_dev.cu -o flash_dev
// (on a compute capability 9.0 device "prod" is then the wgmma path for D = 64; "f128x128" and
// "b64x64" are the mma.sync kernels it replaces there)
//   ./flash_dev            validation, then timing
//   ./flash_dev --quick    a few small validation cases (for compute-sanitizer)
//   ./flash_dev --validate validation only
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "layers/softmax_attention/flash_attention_backward.cu"
#include "layers/softmax_attention/flash_attention_forward.cu"
#include "layers/softmax_attention/flash_attention_sm90.cu"

using namespace hyb;

#define CK(call)                                                                                      \
  do {                                                                                                \
    cudaError_t err_ = (call);                                                                        \
    if (err_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)

namespace {

// ---------------------------------------------------------------------------------------------
// host bf16 (round to nearest even)
uint16_t f2bf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float bf2f(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::mt19937_64& rng() {
  static std::mt19937_64 g(std::random_device{}());
  return g;
}
// bf16-representable normal values, so the reference sees exactly what the kernel sees.
std::vector<float> randn(size_t n, float sd) {
  std::normal_distribution<float> nd(0.f, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = bf2f(f2bf(nd(rng())));
  return x;
}

template <class T>
T* dalloc(size_t n) {
  T* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return p;
}
float* upload(const std::vector<float>& x) {
  float* p = dalloc<float>(x.size());
  CK(cudaMemcpy(p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  return p;
}
std::vector<float> download_f32(const float* p, size_t n) {
  std::vector<float> x(n);
  CK(cudaMemcpy(x.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return x;
}

// ---------------------------------------------------------------------------------------------
// Naive fp32 reference, straight from attention.md 2-3. Contiguous (B, T, H, D) inputs.
struct RefDims {
  int B, Tq, Tk, Hq, Hkv, D, Dv, window, sinks;
  float scale;
  const float* scale_h;
};
__device__ float ref_scale(const RefDims& d, int h) { return d.scale_h ? d.scale_h[h] : d.scale; }
__device__ bool ref_visible(const RefDims& d, int i, int j) {
  const int p = i + d.Tk - d.Tq;
  return j <= p && (d.window == 0 || p - j < d.window || j < d.sinks);
}

// dots[b, h, i, j] = <q_i, k_j>
__global__ void ref_dots(const float* q, const float* k, float* dots, RefDims d) {
  const int64_t n = int64_t(d.B) * d.Hq * d.Tq * d.Tk;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int j = x % d.Tk, i = (x / d.Tk) % d.Tq, h = (x / (int64_t(d.Tk) * d.Tq)) % d.Hq;
    const int b = x / (int64_t(d.Tk) * d.Tq * d.Hq), g = h / (d.Hq / d.Hkv);
    const float* qi = q + ((int64_t(b) * d.Tq + i) * d.Hq + h) * d.D;
    const float* kj = k + ((int64_t(b) * d.Tk + j) * d.Hkv + g) * d.D;
    float s = 0.f;
    for (int e = 0; e < d.D; ++e) s += qi[e] * kj[e];
    dots[x] = s;
  }
}
// P = softmax over visible keys of scale * dots, lse per row (two passes, as the CPU reference).
__global__ void ref_softmax(const float* dots, float* P, float* lse, RefDims d) {
  const int64_t rows = int64_t(d.B) * d.Hq * d.Tq;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const int i = r % d.Tq, h = (r / d.Tq) % d.Hq;
    const float sc = ref_scale(d, h);
    const float* s = dots + r * d.Tk;
    float* p = P + r * d.Tk;
    float m = -INFINITY;
    for (int j = 0; j < d.Tk; ++j)
      if (ref_visible(d, i, j)) m = fmaxf(m, sc * s[j]);
    float l = 0.f;
    for (int j = 0; j < d.Tk; ++j) l += ref_visible(d, i, j) ? expf(sc * s[j] - m) : 0.f;
    const float L = m + logf(l);
    for (int j = 0; j < d.Tk; ++j) p[j] = ref_visible(d, i, j) ? expf(sc * s[j] - L) : 0.f;
    lse[r] = L;
  }
}
// o[b, i, h, :] = sum_j P v_j
__global__ void ref_pv(const float* P, const float* v, float* o, RefDims d) {
  const int64_t n = int64_t(d.B) * d.Tq * d.Hq * d.Dv;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int e = x % d.Dv, h = (x / d.Dv) % d.Hq, i = (x / (int64_t(d.Dv) * d.Hq)) % d.Tq;
    const int b = x / (int64_t(d.Dv) * d.Hq * d.Tq), g = h / (d.Hq / d.Hkv);
    const float* p = P + ((int64_t(b) * d.Hq + h) * d.Tq + i) * d.Tk;
    float acc = 0.f;
    for (int j = 0; j < d.Tk; ++j) acc += p[j] * v[((int64_t(b) * d.Tk + j) * d.Hkv + g) * d.Dv + e];
    o[x] = acc;
  }
}
// dS = P ∘ (dO v_j - Di), Di = <dO_i, o_i> - dlse_i
// dS_mag = P (|dO v_j| + |Di|): the size of dS before the cancellation in dP - Di.
__global__ void ref_ds(const float* P, const float* dO, const float* v, const float* o, const float* dlse, float* dS,
                       float* dS_mag, RefDims d) {
  const int64_t n = int64_t(d.B) * d.Hq * d.Tq * d.Tk;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int j = x % d.Tk, i = (x / d.Tk) % d.Tq, h = (x / (int64_t(d.Tk) * d.Tq)) % d.Hq;
    const int b = x / (int64_t(d.Tk) * d.Tq * d.Hq), g = h / (d.Hq / d.Hkv);
    const float* gi = dO + ((int64_t(b) * d.Tq + i) * d.Hq + h) * d.Dv;
    const float* oi = o + ((int64_t(b) * d.Tq + i) * d.Hq + h) * d.Dv;
    const float* vj = v + ((int64_t(b) * d.Tk + j) * d.Hkv + g) * d.Dv;
    float dp = 0.f, di = 0.f;
    for (int e = 0; e < d.Dv; ++e) dp += gi[e] * vj[e], di += gi[e] * oi[e];
    if (dlse) di -= dlse[(int64_t(b) * d.Hq + h) * d.Tq + i];
    dS[x] = P[x] * (dp - di);
    dS_mag[x] = P[x] * (fabsf(dp) + fabsf(di));
  }
}
// dq[b, i, h, :] = scale_h sum_j dS k_j
__global__ void ref_dq(const float* dS, const float* k, float* dq, RefDims d) {
  const int64_t n = int64_t(d.B) * d.Tq * d.Hq * d.D;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int e = x % d.D, h = (x / d.D) % d.Hq, i = (x / (int64_t(d.D) * d.Hq)) % d.Tq;
    const int b = x / (int64_t(d.D) * d.Hq * d.Tq), g = h / (d.Hq / d.Hkv);
    const float* s = dS + ((int64_t(b) * d.Hq + h) * d.Tq + i) * d.Tk;
    float acc = 0.f;
    for (int j = 0; j < d.Tk; ++j) acc += s[j] * k[((int64_t(b) * d.Tk + j) * d.Hkv + g) * d.D + e];
    dq[x] = ref_scale(d, h) * acc;
  }
}
// dk[b, j, g, :] = sum_{h in g} scale_h sum_i dS q_i ; dv[b, j, g, :] = sum_{h in g} sum_i P dO_i
__global__ void ref_dkdv(const float* dS, const float* P, const float* q, const float* dO, float* dk, float* dv,
                         RefDims d) {
  const int W = max(d.D, d.Dv), G = d.Hq / d.Hkv;
  const int64_t n = int64_t(d.B) * d.Tk * d.Hkv * W;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int e = x % W, g = (x / W) % d.Hkv, j = (x / (int64_t(W) * d.Hkv)) % d.Tk;
    const int b = x / (int64_t(W) * d.Hkv * d.Tk);
    float ak = 0.f, av = 0.f;
    for (int h = g * G; h < (g + 1) * G; ++h) {
      float sk = 0.f;
      for (int i = 0; i < d.Tq; ++i) {
        const int64_t sx = ((int64_t(b) * d.Hq + h) * d.Tq + i) * d.Tk + j;
        if (e < d.D) sk += dS[sx] * q[((int64_t(b) * d.Tq + i) * d.Hq + h) * d.D + e];
        if (e < d.Dv) av += P[sx] * dO[((int64_t(b) * d.Tq + i) * d.Hq + h) * d.Dv + e];
      }
      ak += ref_scale(d, h) * sk;
    }
    const int64_t row = (int64_t(b) * d.Tk + j) * d.Hkv + g;
    if (e < d.D) dk[row * d.D + e] = ak;
    if (e < d.Dv) dv[row * d.Dv + e] = av;
  }
}
// dscale[h] = sum_{b,i,j} dS <q_i, k_j> and its scale dscale_abs[h] = sum dS_mag |<q_i, k_j>|; one
// block per head.
__global__ void ref_dscale(const float* dS, const float* dS_mag, const float* dots, float* dscale, float* dscale_abs,
                           RefDims d) {
  const int h = blockIdx.x;
  double acc = 0.0, acc_abs = 0.0;
  for (int b = 0; b < d.B; ++b)
    for (int64_t x = threadIdx.x; x < int64_t(d.Tq) * d.Tk; x += blockDim.x) {
      const int64_t idx = (int64_t(b) * d.Hq + h) * d.Tq * d.Tk + x;
      acc += double(dS[idx]) * dots[idx];
      acc_abs += fabs(double(dS_mag[idx]) * dots[idx]);
    }
  __shared__ double red[256], red_abs[256];
  red[threadIdx.x] = acc;
  red_abs[threadIdx.x] = acc_abs;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s], red_abs[threadIdx.x] += red_abs[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) dscale[h] = float(red[0]), dscale_abs[h] = float(red_abs[0]);
}

// ---------------------------------------------------------------------------------------------
struct Case {
  std::string name;
  int B, Tq, Tk, Hq, Hkv, D, Dv, window, sinks;
  bool fused = false;     // q, k, v as views into one (B, T, Hq + 2 Hkv, D) buffer
  bool scale_h = false;   // per-head scale (and check dscale_h)
  bool dlse = false;      // upstream lse gradient
  float qsd = 1.f;        // q standard deviation (larger: peakier softmax)
};

struct Reference {
  std::vector<float> o, lse, dq, dk, dv, dscale;
  // sum P_ij (|dP_ij| + |Di|) |s_ij| per head: dscale sums terms that cancel heavily (dP - Di, and
  // rows of dS sum to zero; with one key dS is exactly zero), so its error is measured against the
  // size of the terms before cancelling. The kernel's Di comes from its bf16 o (attention.md 3.1),
  // itself made with bf16 P, which moves a cancelled dscale by percents with peaky logits.
  std::vector<float> dscale_abs;
};

// max_h |out_h - ref_h| / scale_h
double scaled_err(const std::vector<float>& out, const std::vector<float>& ref, const std::vector<float>& scale) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return NAN;
    e = std::max(e, std::fabs(double(out[i]) - ref[i]) / std::max(double(scale[i]), 1e-30));
  }
  return e;
}

double rel_err(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return NAN;
    num += double(out[i] - ref[i]) * (out[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  // Floor for all-zero references (w = 1 gives dq = dk = 0): then the error is absolute per element.
  den = std::max(den, 1e-6 * double(ref.size()));
  return std::sqrt(num / den);
}

// Device copies of one case in the layout the kernels read.
struct Inputs {
  Case c;
  std::vector<float> q, k, v, dout, dlse, scale_h;  // contiguous host copies
  uint16_t *qkv = nullptr, *q_d = nullptr, *k_d = nullptr, *v_d = nullptr, *do_d = nullptr;
  float *dlse_d = nullptr, *scale_h_d = nullptr;
  FlashStrides qs, ks, vs;
  float scale;
};

// Normal bf16 values from a counter hash (Box-Muller): timing inputs too large for the host RNG.
__global__ void fill_randn_bf16(uint16_t* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + uint64_t(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u1 = (float(uint32_t(z)) + 1.f) * 2.3283064e-10f, u2 = float(uint32_t(z >> 32)) * 2.3283064e-10f;
    const float r = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    x[i] = __bfloat16_as_ushort(__float2bfloat16_rn(r));
  }
}
uint16_t* device_randn_bf16(size_t n) {
  uint16_t* p = dalloc<uint16_t>(n);
  fill_randn_bf16<<<4096, 256>>>(p, int64_t(n), rng()());
  CK(cudaGetLastError());
  return p;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f2bf(x[i]);
  return y;
}
uint16_t* upload_bf16(const std::vector<float>& x) {
  uint16_t* p = dalloc<uint16_t>(x.size());
  auto y = to_bf16(x);
  CK(cudaMemcpy(p, y.data(), y.size() * 2, cudaMemcpyHostToDevice));
  return p;
}

// Timing inputs (device_only) are drawn on the GPU and have no host copies.
Inputs make_inputs(const Case& c, bool device_only = false) {
  Inputs in;
  in.c = c;
  in.scale = 1.f / std::sqrt(float(c.D));
  if (device_only) {
    in.q_d = device_randn_bf16(size_t(c.B) * c.Tq * c.Hq * c.D);
    in.k_d = device_randn_bf16(size_t(c.B) * c.Tk * c.Hkv * c.D);
    in.v_d = device_randn_bf16(size_t(c.B) * c.Tk * c.Hkv * c.Dv);
    in.do_d = device_randn_bf16(size_t(c.B) * c.Tq * c.Hq * c.Dv);
    in.qs = {int64_t(c.Tq) * c.Hq * c.D, int64_t(c.Hq) * c.D, c.D};
    in.ks = {int64_t(c.Tk) * c.Hkv * c.D, int64_t(c.Hkv) * c.D, c.D};
    in.vs = {int64_t(c.Tk) * c.Hkv * c.Dv, int64_t(c.Hkv) * c.Dv, c.Dv};
    return in;
  }
  in.q = randn(size_t(c.B) * c.Tq * c.Hq * c.D, c.qsd);
  in.k = randn(size_t(c.B) * c.Tk * c.Hkv * c.D, 1.f);
  in.v = randn(size_t(c.B) * c.Tk * c.Hkv * c.Dv, 1.f);
  in.dout = randn(size_t(c.B) * c.Tq * c.Hq * c.Dv, 1.f);
  if (c.dlse) {
    in.dlse = randn(size_t(c.B) * c.Hq * c.Tq, 1.f);
    in.dlse_d = upload(in.dlse);
  }
  if (c.scale_h) {
    std::uniform_real_distribution<float> u(0.05f, 0.4f);
    for (int h = 0; h < c.Hq; ++h) in.scale_h.push_back(u(rng()));
    in.scale_h_d = upload(in.scale_h);
  }
  if (c.fused) {  // Tq == Tk, D == Dv
    const int W = c.Hq + 2 * c.Hkv;
    std::vector<float> f(size_t(c.B) * c.Tq * W * c.D);
    for (int b = 0; b < c.B; ++b)
      for (int t = 0; t < c.Tq; ++t) {
        float* row = f.data() + (size_t(b) * c.Tq + t) * W * c.D;
        std::memcpy(row, in.q.data() + (size_t(b) * c.Tq + t) * c.Hq * c.D, c.Hq * c.D * 4);
        std::memcpy(row + c.Hq * c.D, in.k.data() + (size_t(b) * c.Tk + t) * c.Hkv * c.D, c.Hkv * c.D * 4);
        std::memcpy(row + (c.Hq + c.Hkv) * c.D, in.v.data() + (size_t(b) * c.Tk + t) * c.Hkv * c.D, c.Hkv * c.D * 4);
      }
    in.qkv = upload_bf16(f);
    in.q_d = in.qkv;
    in.k_d = in.qkv + c.Hq * c.D;
    in.v_d = in.qkv + (c.Hq + c.Hkv) * c.D;
    const FlashStrides s{int64_t(c.Tq) * W * c.D, int64_t(W) * c.D, c.D};
    in.qs = in.ks = in.vs = s;
  } else {
    in.q_d = upload_bf16(in.q);
    in.k_d = upload_bf16(in.k);
    in.v_d = upload_bf16(in.v);
    in.qs = {int64_t(c.Tq) * c.Hq * c.D, int64_t(c.Hq) * c.D, c.D};
    in.ks = {int64_t(c.Tk) * c.Hkv * c.D, int64_t(c.Hkv) * c.D, c.D};
    in.vs = {int64_t(c.Tk) * c.Hkv * c.Dv, int64_t(c.Hkv) * c.Dv, c.Dv};
  }
  in.do_d = upload_bf16(in.dout);
  return in;
}

void free_inputs(Inputs& in) {
  if (in.qkv) {
    CK(cudaFree(in.qkv));
  } else {
    CK(cudaFree(in.q_d));
    CK(cudaFree(in.k_d));
    CK(cudaFree(in.v_d));
  }
  CK(cudaFree(in.do_d));
  if (in.dlse_d) CK(cudaFree(in.dlse_d));
  if (in.scale_h_d) CK(cudaFree(in.scale_h_d));
}

Reference reference(const Inputs& in) {
  const Case& c = in.c;
  RefDims d{c.B, c.Tq, c.Tk, c.Hq, c.Hkv, c.D, c.Dv, c.window, c.sinks, in.scale, in.scale_h_d};
  const int64_t nS = int64_t(c.B) * c.Hq * c.Tq * c.Tk;
  float *q = upload(in.q), *k = upload(in.k), *v = upload(in.v), *g = upload(in.dout);
  float *dots = dalloc<float>(nS), *P = dalloc<float>(nS), *dS = dalloc<float>(nS), *dS_mag = dalloc<float>(nS);
  const size_t nq = size_t(c.B) * c.Tq * c.Hq, nk = size_t(c.B) * c.Tk * c.Hkv;
  float *o = dalloc<float>(nq * c.Dv), *lse = dalloc<float>(nq), *dq = dalloc<float>(nq * c.D);
  float *dk = dalloc<float>(nk * c.D), *dv = dalloc<float>(nk * c.Dv), *dscale = dalloc<float>(c.Hq);
  float* dscale_abs = dalloc<float>(c.Hq);
  const int grid = 4096, block = 256;
  ref_dots<<<grid, block>>>(q, k, dots, d);
  ref_softmax<<<grid, block>>>(dots, P, lse, d);
  ref_pv<<<grid, block>>>(P, v, o, d);
  ref_ds<<<grid, block>>>(P, g, v, o, in.dlse_d, dS, dS_mag, d);
  ref_dq<<<grid, block>>>(dS, k, dq, d);
  ref_dkdv<<<grid, block>>>(dS, P, q, g, dk, dv, d);
  ref_dscale<<<c.Hq, 256>>>(dS, dS_mag, dots, dscale, dscale_abs, d);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  Reference r{download_f32(o, nq * c.Dv), download_f32(lse, nq), download_f32(dq, nq * c.D),
              download_f32(dk, nk * c.D), download_f32(dv, nk * c.Dv), download_f32(dscale, c.Hq),
              download_f32(dscale_abs, c.Hq)};
  for (float* p : {q, k, v, g, dots, P, dS, dS_mag, o, lse, dq, dk, dv, dscale, dscale_abs}) CK(cudaFree(p));
  return r;
}

// Outputs of the kernel under test, poisoned (NaN) before every run.
struct Outputs {
  uint16_t *o, *dq, *dk, *dv;
  float *lse, *dscale;
  void* ws;
  size_t ws_bytes;
};

FlashAttentionForwardParams fwd_params(const Inputs& in, const Outputs& out) {
  const Case& c = in.c;
  FlashAttentionForwardParams p{};
  p.q = in.q_d, p.k = in.k_d, p.v = in.v_d, p.o = out.o, p.lse = out.lse;
  p.q_stride = in.qs, p.k_stride = in.ks, p.v_stride = in.vs;
  p.o_stride = {int64_t(c.Tq) * c.Hq * c.Dv, int64_t(c.Hq) * c.Dv, c.Dv};
  p.B = c.B, p.Tq = c.Tq, p.Tk = c.Tk, p.Hq = c.Hq, p.Hkv = c.Hkv, p.D = c.D, p.Dv = c.Dv;
  p.scale = in.scale, p.scale_h = in.scale_h_d, p.window = c.window, p.sinks = c.sinks;
  return p;
}
FlashAttentionBackwardParams bwd_params(const Inputs& in, const Outputs& out) {
  const Case& c = in.c;
  FlashAttentionBackwardParams p{};
  p.fwd = fwd_params(in, out);
  p.dout = in.do_d;
  p.dout_stride = p.fwd.o_stride;
  p.dlse = in.dlse_d;
  p.dq = out.dq, p.dk = out.dk, p.dv = out.dv;
  p.dq_stride = {int64_t(c.Tq) * c.Hq * c.D, int64_t(c.Hq) * c.D, c.D};
  p.dk_stride = {int64_t(c.Tk) * c.Hkv * c.D, int64_t(c.Hkv) * c.D, c.D};
  p.dv_stride = {int64_t(c.Tk) * c.Hkv * c.Dv, int64_t(c.Hkv) * c.Dv, c.Dv};
  p.dscale_h = c.scale_h ? out.dscale : nullptr;
  return p;
}

Outputs alloc_outputs(const Inputs& in) {
  const Case& c = in.c;
  const size_t nq = size_t(c.B) * c.Tq * c.Hq, nk = size_t(c.B) * c.Tk * c.Hkv;
  Outputs o{dalloc<uint16_t>(nq * c.Dv), dalloc<uint16_t>(nq * c.D), dalloc<uint16_t>(nk * c.D),
            dalloc<uint16_t>(nk * c.Dv), dalloc<float>(nq), dalloc<float>(c.Hq), nullptr, 0};
  FlashAttentionBackwardParams bp = bwd_params(in, o);
  o.ws_bytes = std::max<size_t>(flash_attention_backward_workspace_bytes(bp), 256 * 1024 * 1024);
  o.ws = dalloc<char>(o.ws_bytes);
  return o;
}
void free_outputs(Outputs& o) {
  for (void* p : {(void*)o.o, (void*)o.dq, (void*)o.dk, (void*)o.dv, (void*)o.lse, (void*)o.dscale, o.ws}) CK(cudaFree(p));
}
void poison(const Inputs& in, const Outputs& o) {
  const Case& c = in.c;
  const size_t nq = size_t(c.B) * c.Tq * c.Hq, nk = size_t(c.B) * c.Tk * c.Hkv;
  CK(cudaMemset(o.o, 0xff, nq * c.Dv * 2));
  CK(cudaMemset(o.lse, 0xff, nq * 4));
  CK(cudaMemset(o.dq, 0xff, nq * c.D * 2));
  CK(cudaMemset(o.dk, 0xff, nk * c.D * 2));
  CK(cudaMemset(o.dv, 0xff, nk * c.Dv * 2));
  CK(cudaMemset(o.dscale, 0xff, c.Hq * 4));
  CK(cudaMemset(o.ws, 0xff, o.ws_bytes));
}
std::vector<float> download_bf16(const uint16_t* p, size_t n) {
  std::vector<uint16_t> y(n);
  CK(cudaMemcpy(y.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = bf2f(y[i]);
  return x;
}

using FwdFn = cudaError_t (*)(const FlashAttentionForwardParams&, cudaStream_t);
using BwdFn = cudaError_t (*)(const FlashAttentionBackwardParams&, void*, cudaStream_t);
struct Variant {
  const char* name;
  FwdFn fwd;
  BwdFn bwd;
  int max_d;  // head dims this variant's tile covers (0: any, the production dispatch)
  bool d64_only = false;  // the wgmma kernels: D = Dv = 64 exactly
};

// Tile variants (the production defaults are "prod"): f/b for D = 64, g/c for D = 128.
using F128x128 = flash::ForwardDefault<64, true>;
using B64x64 = flash::BackwardDefault<64, true>;
using F128x64q = flash::ForwardTile<64, 128, 64, 4, true, true>;
using F64x64q3 = flash::ForwardTile<64, 64, 64, 4, true, true, 3>;
using G64x64q = flash::ForwardTile<128, 64, 64, 4, true, true>;
using B128x64s = flash::BackwardTile<64, 64, 128, 64, false, true>;
using B64x64s3 = flash::BackwardTile<64, 64, 64, 64, false, true, 3>;
using B64x32s4 = flash::BackwardTile<64, 64, 64, 32, false, true, 4>;
using C128x32s = flash::BackwardTile<128, 128, 128, 32, false, true>;
using C64x64s = flash::BackwardTile<128, 128, 64, 64, false, true>;

// The production forward launched head after head (the order before launch groups): the same
// call's figures show what the grouped order buys. group3: groups of three heads, so the cases
// whose B Hq is not a multiple of 3 end in a smaller group (the automatic size is usually all heads
// at the validation shapes).
template <int kGroup>
cudaError_t forward_head_group(const FlashAttentionForwardParams& p, cudaStream_t s) {
  FlashAttentionForwardParams o = p;
  o.head_group = kGroup;
  return flash_attention_forward(o, s);
}

const Variant kFwdVariants[] = {
    {"prod", flash_attention_forward, nullptr, 0},
    {"head1", forward_head_group<1>, nullptr, 0},
    {"group3", forward_head_group<3>, nullptr, 0},
    {"f128x128", flash::launch_forward<F128x128>, nullptr, 64},
    {"w192", flash::launch_forward_sm90<flash::Sm90ForwardTile<3, 1>>, nullptr, 64, true},
    {"w128x1", flash::launch_forward_sm90<flash::Sm90ForwardTile<2, 1>>, nullptr, 64, true},
    {"w64x3", flash::launch_forward_sm90<flash::Sm90ForwardTile<1, 3>>, nullptr, 64, true},
    {"f128x64q", flash::launch_forward<F128x64q>, nullptr, 64},
    {"f64x64q3", flash::launch_forward<F64x64q3>, nullptr, 64},
    {"g64x64q", flash::launch_forward<G64x64q>, nullptr, 128},
};
// The production backward in deterministic mode (attention.md 4.2).
cudaError_t backward_deterministic(const FlashAttentionBackwardParams& p, void* ws, cudaStream_t s) {
  FlashAttentionBackwardParams d = p;
  d.deterministic = true;
  return flash_attention_backward(d, ws, s);
}

// The production backward launched head after head to the end (the order before the interleaved
// tail, FlashAttentionBackwardParams::tail_heads).
cudaError_t backward_head_order(const FlashAttentionBackwardParams& p, void* ws, cudaStream_t s) {
  FlashAttentionBackwardParams d = p;
  d.tail_heads = -1;
  return flash_attention_backward(d, ws, s);
}

const Variant kBwdVariants[] = {
    {"prod", nullptr, flash_attention_backward, 0},
    {"det", nullptr, backward_deterministic, 0},
    {"headseq", nullptr, backward_head_order, 0},
    {"b64x64", nullptr, flash::run_backward<B64x64>, 64},
    {"w128", nullptr, flash::run_backward<B64x64, flash::launch_backward_sm90<flash::Sm90BackwardTile<2, 1>>>, 64, true},
    {"w64x2", nullptr, flash::run_backward<B64x64, flash::launch_backward_sm90<flash::Sm90BackwardTile<1, 2>>>, 64, true},
    {"w64x3", nullptr, flash::run_backward<B64x64, flash::launch_backward_sm90<flash::Sm90BackwardTile<1, 3>>>, 64, true},
    {"b128x64s", nullptr, flash::run_backward<B128x64s>, 64},
    {"b64x64s3", nullptr, flash::run_backward<B64x64s3>, 64},
    {"b64x32s4", nullptr, flash::run_backward<B64x32s4>, 64},
    {"c128x32s", nullptr, flash::run_backward<C128x32s>, 128},
    {"c64x64s", nullptr, flash::run_backward<C64x64s>, 128},
};

bool applies(const Variant& v, const Case& c) {
  if (v.d64_only && (c.D != 64 || c.Dv != 64)) return false;
  return v.max_d == 0 || (std::max(c.D, c.Dv) <= v.max_d && c.D % 8 == 0 && c.Dv % 8 == 0);
}

int g_failures = 0;
double g_worst = 0, g_worst_dscale = 0, g_worst_dscale_exact = 0;

void check_case(const Case& c, bool all_variants) {
  Inputs in = make_inputs(c);
  Reference ref = reference(in);
  Outputs out = alloc_outputs(in);
  const size_t nq = size_t(c.B) * c.Tq * c.Hq, nk = size_t(c.B) * c.Tk * c.Hkv;
  for (const Variant& fv : kFwdVariants) {
    if (!applies(fv, c) || (!all_variants && fv.max_d)) continue;
    for (const Variant& bv : kBwdVariants) {
      if (!applies(bv, c) || (!all_variants && bv.max_d)) continue;
      // Every backward variant runs after the production forward, every forward variant before the
      // production backward: the pairs cover each variant once.
      if (fv.max_d && (bv.max_d || bv.bwd == backward_deterministic)) continue;
      poison(in, out);
      FlashAttentionForwardParams fp = fwd_params(in, out);
      FlashAttentionBackwardParams bp = bwd_params(in, out);
      CK(fv.fwd(fp, 0));
      CK(bv.bwd(bp, out.ws, 0));
      CK(cudaDeviceSynchronize());
      const double e_o = rel_err(download_bf16(out.o, nq * c.Dv), ref.o);
      const double e_l = rel_err(download_f32(out.lse, nq), ref.lse);
      const double e_q = rel_err(download_bf16(out.dq, nq * c.D), ref.dq);
      const double e_k = rel_err(download_bf16(out.dk, nk * c.D), ref.dk);
      const double e_v = rel_err(download_bf16(out.dv, nk * c.Dv), ref.dv);
      std::vector<float> dscale = c.scale_h ? download_f32(out.dscale, c.Hq) : std::vector<float>();
      const double e_s = c.scale_h ? scaled_err(dscale, ref.dscale, ref.dscale_abs) : 0.0;
      const double e_s_rel = c.scale_h ? rel_err(dscale, ref.dscale) : 0.0;
      const double worst = std::max({e_o, e_l, e_q, e_k, e_v, e_s});
      const bool ok = std::isfinite(e_o) && std::isfinite(e_l) && std::isfinite(e_q) && std::isfinite(e_k) &&
                      std::isfinite(e_v) && std::isfinite(e_s) && worst < 2e-2;
      if (!ok) ++g_failures;
      g_worst = std::max(g_worst, std::max({e_o, e_l, e_q, e_k, e_v}));
      g_worst_dscale = std::max(g_worst_dscale, e_s);
      g_worst_dscale_exact = std::max(g_worst_dscale_exact, e_s_rel);
      if (bv.bwd == backward_deterministic) {  // a second run must give the same bits
        const auto grads = [&] {
          std::vector<uint16_t> g(nq * c.D + 2 * nk * std::max(c.D, c.Dv));
          CK(cudaMemcpy(g.data(), out.dq, nq * c.D * 2, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(g.data() + nq * c.D, out.dk, nk * c.D * 2, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(g.data() + nq * c.D + nk * c.D, out.dv, nk * c.Dv * 2, cudaMemcpyDeviceToHost));
          return g;
        };
        const std::vector<uint16_t> first = grads();
        const std::vector<float> first_dscale = dscale;
        CK(cudaMemset(out.dq, 0xff, nq * c.D * 2));
        CK(cudaMemset(out.dk, 0xff, nk * c.D * 2));
        CK(cudaMemset(out.dv, 0xff, nk * c.Dv * 2));
        CK(bv.bwd(bp, out.ws, 0));
        CK(cudaDeviceSynchronize());
        const bool same = grads() == first &&
                          (!c.scale_h || std::memcmp(download_f32(out.dscale, c.Hq).data(), first_dscale.data(),
                                                     c.Hq * 4) == 0);
        if (!same) {
          ++g_failures;
          std::printf("FAIL %-34s deterministic backward: a second run gave different bits\n", c.name.c_str());
        }
      }
      std::printf("%-4s %-34s %-9s %-9s o %.1e lse %.1e dq %.1e dk %.1e dv %.1e dscale %.1e (plain rel %.1e)\n",
                  ok ? "ok" : "FAIL", c.name.c_str(), fv.name, bv.name, e_o, e_l, e_q, e_k, e_v, e_s, e_s_rel);
    }
  }
  free_outputs(out);
  free_inputs(in);
}

std::vector<Case> validation_cases(bool quick) {
  std::vector<Case> cs;
  auto add = [&](Case c) {
    c.name = "B" + std::to_string(c.B) + " Tq" + std::to_string(c.Tq) + " Tk" + std::to_string(c.Tk) + " H" +
             std::to_string(c.Hq) + "/" + std::to_string(c.Hkv) + " D" + std::to_string(c.D) +
             (c.Dv != c.D ? "/" + std::to_string(c.Dv) : "") + " w" + std::to_string(c.window) + " s" +
             std::to_string(c.sinks) + (c.fused ? " qkv" : "") + (c.scale_h ? " sh" : "") + (c.dlse ? " dlse" : "") +
             (c.qsd != 1.f ? " peaky" : "");
    cs.push_back(c);
  };
  if (quick) {
    add({"", 2, 70, 70, 4, 2, 64, 64, 0, 0});
    add({"", 1, 129, 129, 2, 1, 64, 64, 17, 5, true});
    add({"", 2, 37, 129, 3, 1, 128, 128, 40, 3, false, true, true});
    add({"", 1, 70, 70, 2, 2, 60, 60, 0, 0});
    add({"", 1, 70, 70, 2, 1, 256, 256, 30, 2});
    return cs;
  }
  for (int T : {1, 37, 70, 129, 1000}) {
    add({"", 2, T, T, 4, 2, 64, 64, 0, 0});                          // causal GQA
    add({"", 2, T, T, 4, 4, 64, 64, 0, 0, true});                    // MHA, fused qkv views
    add({"", 1, T, T, 6, 2, 64, 64, 17, 0});                         // window < tile
    add({"", 2, T, T, 4, 1, 64, 64, 64, 70, false, true});           // window = 64, sinks not a tile multiple
    add({"", 1, T, T, 4, 2, 64, 64, 128, 5, false, false, true});    // window = 128, dlse
    add({"", 2, T, T, 2, 2, 64, 64, 300, 37, true, true, false, 3.f});  // window > tile, peaky
  }
  add({"", 2, 1000, 1000, 4, 2, 64, 64, 1, 0});     // w = 1: o = v, dq = dk = 0
  add({"", 1, 1000, 1000, 2, 1, 64, 64, 2000, 0});  // w > T equals causal
  add({"", 2, 37, 129, 4, 2, 64, 64, 0, 0});        // bottom-right alignment
  add({"", 2, 1, 1000, 4, 1, 64, 64, 0, 0});        // one query against a long cache
  add({"", 1, 70, 1000, 4, 2, 64, 64, 100, 9, false, true, true});
  for (int D : {16, 32, 60, 76, 96, 128, 192, 256}) {
    add({"", 2, 129, 129, 4, 2, D, D, 0, 0, false, false, true});
    add({"", 1, 1000, 1000, 2, 1, D, D, 200, 10, D % 8 == 0, true});
  }
  add({"", 2, 129, 129, 4, 2, 64, 32, 0, 0});   // Dv != D
  add({"", 1, 300, 300, 2, 2, 96, 128, 50, 4});
  return cs;
}

// ---------------------------------------------------------------------------------------------
// Timing: median of >= 20 event-timed runs after warm-up.
template <class F>
float median_ms(F&& fn, int warmup = 5, int reps = 25) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Timing {
  float fwd, bwd, total;
};

struct Bench {
  Inputs in;
  Outputs out;
  explicit Bench(const Case& c) : in(make_inputs(c, true)), out(alloc_outputs(in)) {}
  ~Bench() {
    free_outputs(out);
    free_inputs(in);
  }
  Timing run(FwdFn fwd, BwdFn bwd) {
    FlashAttentionForwardParams fp = fwd_params(in, out);
    FlashAttentionBackwardParams bp = bwd_params(in, out);
    CK(fwd(fp, 0));
    CK(bwd(bp, out.ws, 0));
    CK(cudaDeviceSynchronize());
    Timing t;
    t.fwd = median_ms([&] { CK(fwd(fp, 0)); });
    t.bwd = median_ms([&] { CK(bwd(bp, out.ws, 0)); });
    t.total = median_ms([&] {
      CK(fwd(fp, 0));
      CK(bwd(bp, out.ws, 0));
    });
    return t;
  }
};

// Causal forward FLOPs, attention.md 4.5: 4 B H T^2 D / 2.
double causal_fwd_flops(const Case& c) { return 4.0 * c.B * c.Hq * double(c.Tq) * c.Tq * c.D / 2; }

// Each forward variant of head dim D with the production backward, then each backward variant
// with the production forward.
void time_variants(const Case& c, int D) {
  Bench bench(c);
  for (const Variant& fv : kFwdVariants)
    for (const Variant& bv : kBwdVariants) {
      const bool prod_f = &fv == &kFwdVariants[0], prod_b = &bv == &kBwdVariants[0];
      if ((!prod_f && !prod_b) || (fv.max_d && fv.max_d != D) || (bv.max_d && bv.max_d != D)) continue;
      const Timing t = bench.run(fv.fwd, bv.bwd);
      const double f = causal_fwd_flops(c);
      std::printf("%-7d %-10s %-9s %9.3f %9.3f %9.3f %11.1f %11.1f %11.1f\n", c.Tq, fv.name, bv.name, t.fwd, t.bwd,
                  t.total, f / t.fwd * 1e-9, 2.5 * f / t.bwd * 1e-9, 3.5 * f / t.total * 1e-9);
    }
}

void timing() {
  const char* header = "%-7s %-10s %-9s %9s %9s %9s %11s %11s %11s\n";
  std::printf("\n== timing: B*T = 32768, H = 16, D = 64, bf16, causal (median of 25 after 5 warm-ups)\n");
  std::printf(header, "T", "fwd", "bwd", "fwd ms", "bwd ms", "total ms", "fwd TF/s", "bwd TF/s", "total TF/s");
  for (int T : {1024, 2048, 4096, 8192, 16384}) time_variants(Case{"", 32768 / T, T, T, 16, 16, 64, 64, 0, 0}, 64);
  std::printf("\n== timing: sliding window, T = 16384, B = 2, H = 16, D = 64\n");
  for (int sinks : {0, 64}) {
    Case c{"", 2, 16384, 16384, 16, 16, 64, 64, 512, sinks};
    const Timing t = Bench(c).run(flash_attention_forward, flash_attention_backward);
    std::printf("window 512 sinks %-3d prod: fwd %.3f ms bwd %.3f ms total %.3f ms\n", sinks, t.fwd, t.bwd, t.total);
  }
  std::printf("\n== timing: D = 128, T = 4096, B = 8, H = 16, causal\n");
  std::printf(header, "T", "fwd", "bwd", "fwd ms", "bwd ms", "total ms", "fwd TF/s", "bwd TF/s", "total TF/s");
  time_variants(Case{"", 8, 4096, 4096, 16, 16, 128, 128, 0, 0}, 128);
  std::printf("\n== timing: other head dims, T = 4096, B = 8, H = 16, causal, production tiles\n");
  for (int D : {32, 96}) {
    Case c{"", 8, 4096, 4096, 16, 16, D, D, 0, 0};
    const Timing t = Bench(c).run(flash_attention_forward, flash_attention_backward);
    const double f = causal_fwd_flops(c);
    std::printf("D %-4d prod: fwd %.3f ms (%.0f TF/s) bwd %.3f ms (%.0f TF/s) total %.3f ms (%.0f TF/s)\n", D, t.fwd,
                f / t.fwd * 1e-9, t.bwd, 2.5 * f / t.bwd * 1e-9, t.total, 3.5 * f / t.total * 1e-9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && !std::strcmp(argv[1], "--quick");
  const bool validate_only = argc > 1 && !std::strcmp(argv[1], "--validate");
  if (argc > 1 && !std::strcmp(argv[1], "--profile")) {  // one launch of each kernel, for ncu
    Bench bench(Case{"", 8, 4096, 4096, 16, 16, 64, 64, 0, 0});
    FlashAttentionForwardParams fp = fwd_params(bench.in, bench.out);
    FlashAttentionBackwardParams bp = bwd_params(bench.in, bench.out);
    CK(flash_attention_forward(fp, 0));
    CK(flash_attention_backward(bp, bench.out.ws, 0));
    for (const Variant& bv : kBwdVariants)
      if (bv.max_d == 64) CK(bv.bwd(bp, bench.out.ws, 0));
    CK(cudaDeviceSynchronize());
    return 0;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, L2 %d MB, smem/block optin %zu KB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10);
  std::printf("== validation against the naive fp32 reference (rel error < 2e-2, NaN-poisoned outputs)\n");
  for (const Case& c : validation_cases(quick)) check_case(c, !quick);
  std::printf("validation: %d failure(s); worst rel error o/lse/dq/dk/dv %.2e; dscale %.2e of sum P(|dP|+|Di|)|s| (plain rel %.2e)\n",
              g_failures, g_worst, g_worst_dscale, g_worst_dscale_exact);
  if (!quick && !validate_only) timing();
  return g_failures ? 1 : 0;
}
