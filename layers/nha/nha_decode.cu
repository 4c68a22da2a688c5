// The nha decode step on CUDA (nha_decode.h, nha.md 9): one kernel on the carried state for T new
// tokens, taken in order inside the kernel. One block per (batch, kv head) owns that head's slot
// memories and ring for the whole call, so the in-place updates need no atomics; its G = Hq / Hkv
// query heads share the absorbed token and the window keys.
// Per token: stage q (for the slots and rotated at P for the window) and the absorbed token (its k
// through the slot feature map); push the new token into the ring while updating HK and HV and
// summing the slot logits; then an online softmax (running max and sum per head) over the M slots
// and the window keys in tiles of kKeyTile, so an unlimited window (a KV cache) needs no logit buffer
// of its length. Keys are rotated in registers from the cos/sin table at their stored positions.
// State, logits and sums in fp32; q, k, v, the ring and o in E (f32 or bf16).
// Grid (B Hkv); 256 threads. smem (SmemLayout): G (2 D + 2 Dv + M + 64 + 256 + 6) + D + Dv + 2 M floats,
// 3.2 KiB at the benchmark shape (G 1, D = Dv = 64, M 32); past 48 KiB the launcher raises the limit.
// The slot logits are summed where HK is updated (each thread owns one slot column over a row group)
// so the memory is read once per token; the window keys are few, or come in tiles.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "core/macros.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "layers/nha/nha_decode.h"

namespace hyb {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kKeyTile = 64;  // window keys per online-softmax step
constexpr int kMaxHeadDim = 256;
constexpr int kPairsPerLane = kMaxHeadDim / 2 / kWarpSize;  // rotate-half pairs of one key per lane
static_assert(kThreads % kWarpSize == 0, "whole warps");

template <typename E>
struct NhaDecodeArgs {
  const E *q, *k, *v;          // (B, T, Hq, D), (B, T, Hkv, D), (B, T, Hkv, Dv)
  const float *s, *g;          // (B, T, Hkv, M) or null (M = 0)
  const E* bias;               // (Hq, nb) window bias or null
  const float *cos, *sin;      // (positions, D/2) RoPE table or null
  float *HK, *HV;              // (B, Hkv, D, M), (B, Hkv, M, Dv), in place
  E *ring_k, *ring_v;          // (B, R, Hkv, D), (B, R, Hkv, Dv), in place; position P in slot P % R
  float *ring_s, *ring_g;      // (B, R, Hkv, M) or null (nothing is absorbed from the ring)
  E *o, *o_window;             // (B, T, Hq, Dv); o null when split without slots, o_window null unless split
  float* long_ratio;           // (B, T, Hq) or null
  int T, Hq, Hkv, D, Dv, M, R, G, nb;
  int64_t window, shift, pos;  // window -1: every past key; shift -1: nothing is absorbed
  float scale;
  bool split;
  bool slot_silu;              // silu on the slots' q and on the absorbed k (slot_feature_map swish)
};

// Shared-memory layout in floats, for G heads: q raw and rotated, the absorbed token (k, v, s, e^g),
// the slot-logit partials of the row groups, slot and window probabilities, two accumulators (joint
// or slot branch, window branch), and per head and branch the running max and sum.
struct SmemLayout {
  int q, qr, tk, tv, ts, tg, part, a, b, acc, mx, sum, fac, slotmass, total;
  HYB_HD SmemLayout(int G, int D, int Dv, int M) {
    const int groups = M > 0 ? kThreads / M : 0;
    int at = 0;
    auto take = [&](int n) { const int r = at; at += n; return r; };
    q = take(G * D), qr = take(G * D), tk = take(D), tv = take(Dv), ts = take(M), tg = take(M);
    part = take(groups * G * M), a = take(G * M), b = take(G * kKeyTile), acc = take(2 * G * Dv);
    mx = take(2 * G), sum = take(2 * G), fac = take(G), slotmass = take(G);
    total = at;
  }
};

__device__ __forceinline__ float slot_feature(float x, bool silu) { return silu ? x / (1.f + expf(-x)) : x; }

// Rotated pair (x1, x2) at dims (i, i + D/2) of a vector at position P; unchanged without a table.
__device__ __forceinline__ void turn(const float* cos_t, const float* sin_t, int64_t P, int half, int i, float& x1,
                                     float& x2) {
  if (!cos_t) return;
  const float c = cos_t[P * half + i], s = sin_t[P * half + i];
  const float y1 = x1 * c - x2 * s, y2 = x1 * s + x2 * c;
  x1 = y1, x2 = y2;
}

template <typename E>
__global__ void __launch_bounds__(kThreads) nha_decode_kernel(NhaDecodeArgs<E> a) {
  extern __shared__ float smem[];
  const SmemLayout L(a.G, a.D, a.Dv, a.M);
  float *s_q = smem + L.q, *s_qr = smem + L.qr, *s_tk = smem + L.tk, *s_tv = smem + L.tv, *s_ts = smem + L.ts;
  float *s_tg = smem + L.tg, *s_part = smem + L.part, *s_a = smem + L.a, *s_b = smem + L.b, *s_acc = smem + L.acc;
  float *s_mx = smem + L.mx, *s_sum = smem + L.sum, *s_fac = smem + L.fac, *s_slotmass = smem + L.slotmass;
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int bj = blockIdx.x, b = bj / a.Hkv, j = bj % a.Hkv, G = a.G, D = a.D, Dv = a.Dv, M = a.M, R = a.R;
  const int half = D / 2, groups = M > 0 ? kThreads / M : 0;
  float* HK = M > 0 ? a.HK + int64_t(bj) * D * M : nullptr;
  float* HV = M > 0 ? a.HV + int64_t(bj) * M * Dv : nullptr;
  // Row `slot` of a (B, rows, Hkv, width) tensor at this block's kv head.
  auto row = [&](auto* base, int64_t rows, int64_t slot, int width) { return base + ((b * rows + slot) * a.Hkv + j) * width; };
  const int wb = a.split ? 1 : 0;  // the accumulator the window adds to
  for (int t = 0; t < a.T; ++t) {
    const int64_t P = a.pos + t;
    const bool absorb = M > 0 && a.shift >= 0 && P - a.shift >= 0;
    // A. Stage q of the group (raw for the slots, rotated for the window) and the absorbed token.
    for (int e = tid; e < G * half; e += kThreads) {
      const int h = e / half, i = e % half;
      const E* qt = a.q + ((int64_t(b) * a.T + t) * a.Hq + int64_t(j) * G + h) * D;
      float x1 = to_f32(qt[i]), x2 = to_f32(qt[i + half]);
      s_q[h * D + i] = slot_feature(x1, a.slot_silu), s_q[h * D + i + half] = slot_feature(x2, a.slot_silu);
      turn(a.cos, a.sin, P, half, i, x1, x2);
      s_qr[h * D + i] = x1, s_qr[h * D + i + half] = x2;
    }
    if (D % 2 != 0)  // odd D only without RoPE: the last dim has no pair
      for (int h = tid; h < G; h += kThreads) {
        const float x = to_f32(a.q[((int64_t(b) * a.T + t) * a.Hq + int64_t(j) * G + h) * D + D - 1]);
        s_q[h * D + D - 1] = slot_feature(x, a.slot_silu), s_qr[h * D + D - 1] = x;
      }
    if (absorb) {
      const bool own = a.shift == 0;
      const int64_t slot = own ? t : (P - a.shift) % R, rows = own ? a.T : R;
      const E *ka = row(own ? a.k : a.ring_k, rows, slot, D), *va = row(own ? a.v : a.ring_v, rows, slot, Dv);
      const float *sa = row(own ? a.s : a.ring_s, rows, slot, M), *ga = row(own ? a.g : a.ring_g, rows, slot, M);
      for (int i = tid; i < D; i += kThreads) s_tk[i] = slot_feature(to_f32(ka[i]), a.slot_silu);
      for (int c = tid; c < Dv; c += kThreads) s_tv[c] = to_f32(va[c]);
      for (int m = tid; m < M; m += kThreads) s_ts[m] = sa[m], s_tg[m] = expf(ga[m]);
    }
    __syncthreads();
    // B. Push the token into the ring (the absorbed one is staged: its slot may be this one), update
    //    HK column by column with the slot-logit partials of this thread's rows, then HV.
    if (R > 0) {
      const int64_t slot = P % R;
      const E *kt = row(a.k, a.T, t, D), *vt = row(a.v, a.T, t, Dv);
      for (int i = tid; i < D; i += kThreads) row(a.ring_k, R, slot, D)[i] = kt[i];
      for (int c = tid; c < Dv; c += kThreads) row(a.ring_v, R, slot, Dv)[c] = vt[c];
      if (a.ring_s)
        for (int m = tid; m < M; m += kThreads) {
          row(a.ring_s, R, slot, M)[m] = row(a.s, a.T, t, M)[m];
          row(a.ring_g, R, slot, M)[m] = row(a.g, a.T, t, M)[m];
        }
    }
    if (M > 0 && tid < groups * M) {
      const int m = tid % M, grp = tid / M;
      float* part = s_part + grp * G * M + m;
      for (int h = 0; h < G; ++h) part[h * M] = 0.f;
      for (int i = grp; i < D; i += groups) {
        float hk = HK[i * M + m];
        if (absorb) {
          hk = hk * s_tg[m] + s_tk[i] * s_ts[m];
          HK[i * M + m] = hk;
        }
        for (int h = 0; h < G; ++h) part[h * M] += s_q[h * D + i] * hk;
      }
    }
    if (absorb)
      for (int e = tid; e < M * Dv; e += kThreads) {
        const int m = e / Dv, c = e % Dv;
        HV[e] = s_tg[m] * HV[e] + s_ts[m] * s_tv[c];
      }
    __syncthreads();
    // C. Slot logits a = scale q^T HK.
    for (int e = tid; e < G * M; e += kThreads) {
      float z = 0.f;
      for (int grp = 0; grp < groups; ++grp) z += s_part[grp * G * M + e];
      s_a[e] = a.scale * z;
    }
    __syncthreads();
    // D. The slots open each head's softmax: max, e^{a - max} in place, sum. Branch 1 starts empty.
    for (int h = warp; h < G; h += kWarps) {
      float mx = -INFINITY;
      for (int m = lane; m < M; m += kWarpSize) mx = fmaxf(mx, s_a[h * M + m]);
      mx = warp_reduce_max(mx);
      float z = 0.f;
      for (int m = lane; m < M; m += kWarpSize) z += (s_a[h * M + m] = expf(s_a[h * M + m] - mx));
      z = warp_reduce_sum(z);
      if (lane == 0) {
        s_mx[h] = mx, s_sum[h] = z, s_slotmass[h] = z;
        s_mx[G + h] = -INFINITY, s_sum[G + h] = 0.f;
      }
    }
    __syncthreads();
    // E. Slot part of the output: acc0 = sum_m e^{a_m - max} HV[m, :].
    for (int e = tid; e < G * Dv; e += kThreads) {
      const int h = e / Dv, c = e % Dv;
      float z = 0.f;
      for (int m = 0; m < M; ++m) z += s_a[h * M + m] * HV[m * Dv + c];
      s_acc[e] = z;
      s_acc[G * Dv + e] = 0.f;
    }
    // F. The window keys max(0, P - window + 1) .. P, one tile at a time.
    const int64_t j0 = a.window < 0 ? 0 : (P - a.window + 1 > 0 ? P - a.window + 1 : 0);
    const int64_t nw = a.window == 0 ? 0 : P - j0 + 1;
    for (int64_t k0 = 0; k0 < nw; k0 += kKeyTile) {
      const int n = nw - k0 < kKeyTile ? int(nw - k0) : kKeyTile;
      __syncthreads();  // the previous tile's probabilities (or step E) are consumed
      for (int kk = warp; kk < n; kk += kWarps) {  // a warp per key, lane l turns the pairs l, l + 32, ...
        const int64_t pj = j0 + k0 + kk;
        const E* key = row(a.ring_k, R, pj % R, D);
        float x1[kPairsPerLane], x2[kPairsPerLane];
#pragma unroll
        for (int r = 0; r < kPairsPerLane; ++r) {
          const int i = lane + r * kWarpSize;
          x1[r] = i < half ? to_f32(key[i]) : 0.f;
          x2[r] = i < half ? to_f32(key[i + half]) : 0.f;
          if (i < half) turn(a.cos, a.sin, pj, half, i, x1[r], x2[r]);
        }
        const float odd = D % 2 != 0 && lane == 0 ? to_f32(key[D - 1]) : 0.f;  // the unpaired dim (no RoPE)
        for (int h = 0; h < G; ++h) {
          const float* qh = s_qr + h * D;
          float z = D % 2 != 0 && lane == 0 ? qh[D - 1] * odd : 0.f;
#pragma unroll
          for (int r = 0; r < kPairsPerLane; ++r) {
            const int i = lane + r * kWarpSize;
            if (i < half) z += qh[i] * x1[r] + qh[i + half] * x2[r];
          }
          z = warp_reduce_sum(z);
          if (lane == 0) {
            const float bias = a.bias ? to_f32(a.bias[int64_t(j * G + h) * a.nb + (P - pj)]) : 0.f;
            s_b[h * kKeyTile + kk] = a.scale * z + bias;
          }
        }
      }
      __syncthreads();
      for (int h = warp; h < G; h += kWarps) {  // online softmax: rescale by e^{old max - new max}
        float mx = -INFINITY;
        for (int kk = lane; kk < n; kk += kWarpSize) mx = fmaxf(mx, s_b[h * kKeyTile + kk]);
        mx = fmaxf(warp_reduce_max(mx), s_mx[wb * G + h]);
        float z = 0.f;
        for (int kk = lane; kk < n; kk += kWarpSize) z += (s_b[h * kKeyTile + kk] = expf(s_b[h * kKeyTile + kk] - mx));
        z = warp_reduce_sum(z);
        if (lane == 0) {
          const float old = s_mx[wb * G + h], f = old == -INFINITY ? 0.f : expf(old - mx);
          s_fac[h] = f;
          s_sum[wb * G + h] = s_sum[wb * G + h] * f + z;
          s_mx[wb * G + h] = mx;
          s_slotmass[h] *= f;
        }
      }
      __syncthreads();
      for (int e = tid; e < G * Dv; e += kThreads) {
        const int h = e / Dv, c = e % Dv;
        float z = 0.f;
        for (int kk = 0; kk < n; ++kk) z += s_b[h * kKeyTile + kk] * to_f32(row(a.ring_v, R, (j0 + k0 + kk) % R, Dv)[c]);
        float& acc = s_acc[wb * G * Dv + e];
        acc = acc * s_fac[h] + z;
      }
    }
    __syncthreads();
    // G. o = acc / sum per branch; omega_L = the slots' share of the joint mass.
    for (int e = tid; e < G * Dv; e += kThreads) {
      const int h = e / Dv, c = e % Dv;
      const int64_t at = ((int64_t(b) * a.T + t) * a.Hq + int64_t(j) * G + h) * Dv + c;
      if (a.o) a.o[at] = from_f32<E>(s_acc[e] / s_sum[h]);
      if (a.o_window) a.o_window[at] = from_f32<E>(s_acc[G * Dv + e] / s_sum[G + h]);
    }
    if (a.long_ratio)
      for (int h = tid; h < G; h += kThreads)
        a.long_ratio[(int64_t(b) * a.T + t) * a.Hq + int64_t(j) * G + h] = s_slotmass[h] / s_sum[h];
    __syncthreads();  // the next token restages the shared buffers and reads this token's ring slot
  }
}

}  // namespace

NhaDecodeOutputs nha_decode_step_cuda(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& s0,
                                      const Tensor& g0, const Tensor& bias0, const RopeTable* rope, NhaDecodeState& st,
                                      const NhaDecodeParams& p) {
  const NhaDecodeDims d = nha_decode_dims(q0, k0, v0, s0, g0, bias0, rope, st, p);
  HYB_CHECK(d.M <= kThreads && d.D <= kMaxHeadDim, "nha_decode_step_cuda: M = ", d.M, " slots and D = ", d.D,
            "; the kernel takes at most ", kThreads, " slots and D <= ", kMaxHeadDim);
  auto cont = [](const Tensor& x) { return x.defined() ? x.contiguous() : Tensor(); };
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), s = cont(s0), g = cont(g0),
               bias = cont(bias0);
  const Device dev = q.device();
  NhaDecodeOutputs out;
  if (!p.split || d.M > 0) out.o = Tensor::empty({d.B, d.T, d.Hq, d.Dv}, q.dtype(), dev);
  if (p.split && p.window != 0) out.o_window = Tensor::empty({d.B, d.T, d.Hq, d.Dv}, q.dtype(), dev);
  if (p.long_ratio) out.long_ratio = Tensor::empty({d.B, d.T, d.Hq}, DType::f32, dev);
  if (d.B * d.Hkv == 0) return out;
  const bool turns = rope && p.window != 0;
  const SmemLayout layout(int(d.group), int(d.D), int(d.Dv), int(d.M));
  const size_t smem = size_t(layout.total) * sizeof(float);
  const unsigned grid = unsigned(d.B * d.Hkv);
  visit_cuda_float("nha_decode_step_cuda", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<E>() : static_cast<E*>(nullptr); };
    auto f32 = [](const Tensor& t) { return t.defined() ? t.data<float>() : static_cast<float*>(nullptr); };
    NhaDecodeArgs<E> a;
    a.q = q.data<E>(), a.k = k.data<E>(), a.v = v.data<E>(), a.s = f32(s), a.g = f32(g), a.bias = ptr(bias);
    a.cos = turns ? rope->cos.data<float>() : nullptr, a.sin = turns ? rope->sin.data<float>() : nullptr;
    a.HK = f32(st.HK), a.HV = f32(st.HV), a.ring_k = ptr(st.ring_k), a.ring_v = ptr(st.ring_v);
    a.ring_s = d.M > 0 && p.shift > 0 ? f32(st.ring_s) : nullptr, a.ring_g = d.M > 0 && p.shift > 0 ? f32(st.ring_g) : nullptr;
    a.o = ptr(out.o), a.o_window = ptr(out.o_window), a.long_ratio = f32(out.long_ratio);
    a.T = int(d.T), a.Hq = int(d.Hq), a.Hkv = int(d.Hkv), a.D = int(d.D), a.Dv = int(d.Dv), a.M = int(d.M);
    a.R = int(d.R), a.G = int(d.group), a.nb = bias.defined() ? int(bias.size(1)) : 0;
    a.window = p.window, a.shift = p.shift, a.pos = p.pos;
    a.scale = float(p.scale ? *p.scale : 1.0 / std::sqrt(double(d.D)));
    a.split = p.split;
    a.slot_silu = p.slot_silu;
    if (smem > 48 * 1024)
      HYB_CUDA_CHECK(cudaFuncSetAttribute(nha_decode_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    nha_decode_kernel<E><<<grid, kThreads, smem, current_stream(dev.index)>>>(a);
    HYB_CUDA_LAUNCH_CHECK("nha_decode_kernel", grid, kThreads, smem);
  });
  return out;
}

}  // namespace hyb
