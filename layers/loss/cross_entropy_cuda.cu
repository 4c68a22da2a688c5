// CUDA cross-entropy over the vocabulary (cross_entropy_op.h has the math). One block per row; the
// forward makes one pass with an online max/sum (fp32) and the argmax, and tallies the counted and
// the out-of-range targets on the device (integer atomics: exact in any order) instead of waiting
// for the device to check them; the backward recomputes the softmax from the saved lse and writes
// dlogits IN PLACE over the saved logits: the logits are not needed after this node and a second
// (N, V) buffer would be the largest tensor of the step.
// Both read the row in 16-byte packs where the padded row width and the pointer allow (the columns
// from the last whole pack below `vocab` up to `vocab` are then read one by one). The forward folds a
// whole pack into a thread's running (max, sum) with one exp per element and one rescale per new max.
#include <cfloat>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "kernels/vector_io.cuh"
#include "layers/loss/cross_entropy_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 256;

struct MaxSumArg {
  float m, s;  // running max and sum of exp(z - m)
  int arg;     // index of the max (lowest on ties)
};

__device__ __forceinline__ MaxSumArg combine(MaxSumArg a, MaxSumArg b) {
  if (b.m > a.m || (b.m == a.m && b.arg < a.arg)) {
    const float sa = a.m == -FLT_MAX ? 0.f : a.s * __expf(a.m - b.m);
    return {b.m, b.s + sa, b.arg};
  }
  const float sb = b.m == -FLT_MAX ? 0.f : b.s * __expf(b.m - a.m);
  return {a.m, a.s + sb, a.arg};
}

// Folds values v[0..n) at columns base.. into acc: the pack's max (first index on ties) first, so the
// running sum is rescaled at most once, then one exp per value.
template <int N>
__device__ __forceinline__ void fold(MaxSumArg& acc, const float (&v)[N], int base) {
  float pm = v[0];
  int pa = 0;
#pragma unroll
  for (int e = 1; e < N; ++e)
    if (v[e] > pm) {
      pm = v[e];
      pa = e;
    }
  if (pm > acc.m) {
    acc.s = acc.m == -FLT_MAX ? 0.f : acc.s * __expf(acc.m - pm);
    acc.m = pm;
    acc.arg = base + pa;
  }
  float s = 0;
#pragma unroll
  for (int e = 0; e < N; ++e) s += __expf(v[e] - acc.m);
  acc.s += s;
}

template <typename T, int V>
__global__ void cross_entropy_forward_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                                             float* __restrict__ nll, float* __restrict__ lse, int32_t* __restrict__ argmax,
                                             unsigned long long* __restrict__ tally, int64_t Vp, int64_t vocab,
                                             int32_t ignore_index) {
  const int64_t row = blockIdx.x;
  const T* z = logits + row * Vp;
  // The target's logit is read while the row streams in, not after the reduction.
  float zt = 0.f;
  int32_t t = 0;
  if (threadIdx.x == 0) {
    t = targets[row];
    if (t != ignore_index && t >= 0 && t < vocab) zt = to_f32(z[t]);
  }
  MaxSumArg acc{-FLT_MAX, 0.f, INT_MAX};
  const int packed_end = int(vocab - vocab % V);
#pragma unroll 2
  for (int v = threadIdx.x * V; v < packed_end; v += blockDim.x * V) {
    float x[V];
    load_f32(z + v, x);
    fold(acc, x, v);
  }
  for (int v = packed_end + int(threadIdx.x); v < int(vocab); v += blockDim.x) {
    const float x[1] = {to_f32(z[v])};
    fold(acc, x, v);
  }
  __shared__ MaxSumArg s_part[kThreads / kWarpSize];
  for (int off = kWarpSize / 2; off > 0; off /= 2) {
    MaxSumArg o{__shfl_xor_sync(0xffffffffu, acc.m, off), __shfl_xor_sync(0xffffffffu, acc.s, off),
                __shfl_xor_sync(0xffffffffu, acc.arg, off)};
    acc = combine(acc, o);
  }
  if (threadIdx.x % kWarpSize == 0) s_part[threadIdx.x / kWarpSize] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSumArg r = s_part[0];
    for (int w = 1; w < int(blockDim.x / kWarpSize); ++w) r = combine(r, s_part[w]);
    const float l = r.m + logf(r.s);
    lse[row] = l;
    argmax[row] = r.arg;
    if (t == ignore_index) {
      nll[row] = 0.f;
    } else if (t < 0 || t >= vocab) {
      atomicAdd(tally + 1, 1ull);
      nll[row] = 0.f;
    } else {
      atomicAdd(tally, 1ull);
      nll[row] = l - zt;
    }
  }
}

template <typename T, int V>
__global__ void cross_entropy_backward_kernel(T* __restrict__ logits, const int32_t* __restrict__ targets,
                                              const float* __restrict__ lse, int64_t Vp, int64_t vocab,
                                              int32_t ignore_index, float scale) {
  const int64_t row = blockIdx.x;
  T* z = logits + row * Vp;
  const int32_t t = targets[row];
  const bool counted = t != ignore_index;
  const float l = lse[row];
  for (int v = threadIdx.x * V; v < int(Vp); v += blockDim.x * V) {
    float x[V], g[V];
    load_f32(z + v, x);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      g[e] = 0.f;
      if (counted && v + e < vocab) g[e] = scale * (__expf(x[e] - l) - (v + e == t ? 1.f : 0.f));
    }
    store_f32(z + v, g);
  }
}

}  // namespace

CrossEntropyResult cross_entropy_forward_cuda(const Tensor& logits0, const Tensor& targets0, int64_t vocab,
                                              int32_t ignore_index) {
  Tensor logits = logits0.contiguous(), targets = targets0.contiguous();
  const int64_t N = logits.size(0), Vp = logits.size(1);
  const Device d = logits.device();
  const int dev = d.index;
  CrossEntropyResult r;
  r.nll = Tensor::empty({N}, DType::f32, d);
  r.lse = Tensor::empty({N}, DType::f32, d);
  r.argmax = Tensor::empty({N}, DType::i32, d);
  r.tally = Tensor::zeros({2}, DType::i64, d);
  r.vocab = vocab;
  static_assert(sizeof(unsigned long long) == sizeof(int64_t));
  HYB_CHECK(Vp < INT32_MAX, "cross_entropy_forward_cuda: rows of ", Vp, " columns exceed the 32-bit column index");
  if (N > 0) {
    visit_cuda_float("cross_entropy_forward_cuda", logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      auto launch = [&](auto kernel) {
        kernel<<<int(N), kThreads, 0, current_stream(dev)>>>(logits.data<T>(), targets.data<int32_t>(), r.nll.data<float>(),
                                                             r.lse.data<float>(), r.argmax.data<int32_t>(),
                                                             reinterpret_cast<unsigned long long*>(r.tally.data<int64_t>()),
                                                             Vp, vocab, ignore_index);
        HYB_CUDA_LAUNCH_CHECK("cross_entropy_forward_kernel", N, kThreads, 0);
      };
      if (pack_width<T>(Vp, {logits.data<T>()}) > 1)
        launch(cross_entropy_forward_kernel<T, kPack16<T>>);
      else
        launch(cross_entropy_forward_kernel<T, 1>);
    });
  }
  return r;
}

Tensor cross_entropy_backward_cuda(const CrossEntropySaved& s, double dloss) {
  HYB_CHECK(s.logits.is_contiguous(), "cross_entropy_backward_cuda: the saved logits must be contiguous");
  const int64_t N = s.logits.size(0), Vp = s.logits.size(1);
  const int dev = s.logits.device().index;
  Tensor targets = s.targets.contiguous();
  s.logits.bump_version();
  if (N > 0) {
    visit_cuda_float("cross_entropy_backward_cuda", s.logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      auto launch = [&](auto kernel) {
        kernel<<<int(N), kThreads, 0, current_stream(dev)>>>(s.logits.data<T>(), targets.data<int32_t>(),
                                                             s.lse.data<float>(), Vp, s.vocab, s.ignore_index,
                                                             float(dloss / double(s.count)));
        HYB_CUDA_LAUNCH_CHECK("cross_entropy_backward_kernel", N, kThreads, 0);
      };
      if (pack_width<T>(Vp, {s.logits.data<T>()}) > 1)
        launch(cross_entropy_backward_kernel<T, kPack16<T>>);
      else
        launch(cross_entropy_backward_kernel<T, 1>);
    });
  }
  return s.logits;
}

}  // namespace hyb
