// CUDA cross-entropy over the vocabulary (cross_entropy_op.h has the math). One block per row; the
// forward makes one pass with an online max/sum (fp32) and the argmax; the backward recomputes the
// softmax from the saved lse and writes dlogits IN PLACE over the saved logits: the logits are not
// needed after this node and a second (N, V) buffer would be the largest tensor of the step.
#include <cfloat>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
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

template <typename T>
__global__ void cross_entropy_forward_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                                             float* __restrict__ nll, float* __restrict__ lse, int32_t* __restrict__ argmax,
                                             int* __restrict__ bad, int64_t Vp, int64_t vocab, int32_t ignore_index) {
  const int64_t row = blockIdx.x;
  const T* z = logits + row * Vp;
  MaxSumArg acc{-FLT_MAX, 0.f, INT_MAX};
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) acc = combine(acc, {to_f32(z[v]), 1.f, int(v)});
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
    const int32_t t = targets[row];
    if (t == ignore_index) {
      nll[row] = 0.f;
    } else if (t < 0 || t >= vocab) {
      *bad = 1;
      nll[row] = 0.f;
    } else {
      nll[row] = l - to_f32(z[t]);
    }
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(T* __restrict__ logits, const int32_t* __restrict__ targets,
                                              const float* __restrict__ lse, int64_t Vp, int64_t vocab,
                                              int32_t ignore_index, float scale) {
  const int64_t row = blockIdx.x;
  T* z = logits + row * Vp;
  const int32_t t = targets[row];
  const bool counted = t != ignore_index;
  const float l = lse[row];
  for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
    float g = 0.f;
    if (counted && v < vocab) g = scale * (__expf(to_f32(z[v]) - l) - (v == t ? 1.f : 0.f));
    z[v] = from_f32<T>(g);
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
  Tensor bad = Tensor::zeros({1}, DType::i32, d);
  if (N > 0) {
    visit_cuda_float("cross_entropy_forward_cuda", logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      cross_entropy_forward_kernel<T><<<int(N), kThreads, 0, current_stream(dev)>>>(
          logits.data<T>(), targets.data<int32_t>(), r.nll.data<float>(), r.lse.data<float>(), r.argmax.data<int32_t>(),
          bad.data<int32_t>(), Vp, vocab, ignore_index);
      HYB_CUDA_LAUNCH_CHECK("cross_entropy_forward_kernel", N, kThreads, 0);
    });
  }
  HYB_CHECK(bad.item() == 0, "cross_entropy: a target is outside [0, ", vocab, ")");
  std::vector<double> t = targets.to_double_vector();
  for (double v : t) r.count += v != ignore_index;
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
      cross_entropy_backward_kernel<T><<<int(N), kThreads, 0, current_stream(dev)>>>(
          s.logits.data<T>(), targets.data<int32_t>(), s.lse.data<float>(), Vp, s.vocab, s.ignore_index,
          float(dloss / double(s.count)));
      HYB_CUDA_LAUNCH_CHECK("cross_entropy_backward_kernel", N, kThreads, 0);
    });
  }
  return s.logits;
}

}  // namespace hyb
