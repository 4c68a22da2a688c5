// Kernels and launchers behind tensor_cuda.h: strided copy with dtype conversion, fill, add_, scale_,
// sum of squares. Elementwise kernels are grid-stride loops of 256 threads over 16-byte packs when every
// pointer is 16-byte aligned (the allocator's blocks are), else over single elements. add_ and scale_
// compute in fp64 without fused multiply-add, exactly as the CPU loops do, so the two agree bit for bit.
#include "core/cuda/tensor_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "core/dispatch.h"
#include "kernels/convert.cuh"
#include "kernels/reduce.cuh"
#include "kernels/vector_io.cuh"

namespace hyb {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;

// A tensor pair's shape and strides after dropping unit dimensions and merging neighbours that are
// contiguous in both, so most views reach the kernel as one or two dimensions.
struct StridedLayout {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t dst_stride[kMaxDims] = {};
  int64_t src_stride[kMaxDims] = {};  // all 0 for fill
};

StridedLayout collapse(const char* op, const Tensor& dst, const Tensor* src) {
  StridedLayout l;
  for (int64_t d = 0; d < dst.dim(); ++d) {
    const int64_t size = dst.size(d);
    if (size == 1) continue;
    const int64_t ds = dst.stride(d), ss = src ? src->stride(d) : 0;
    const int k = l.ndim - 1;
    if (k >= 0 && l.dst_stride[k] == ds * size && l.src_stride[k] == ss * size) {
      l.shape[k] *= size;
      l.dst_stride[k] = ds;
      l.src_stride[k] = ss;
      continue;
    }
    HYB_CHECK(l.ndim < kMaxDims, op, ": ", dst.str(), " has more than ", kMaxDims,
              " dimensions that cannot be merged; the CUDA strided kernels take at most ", kMaxDims);
    l.shape[l.ndim] = size;
    l.dst_stride[l.ndim] = ds;
    l.src_stride[l.ndim] = ss;
    ++l.ndim;
  }
  return l;
}

bool is_dense(const StridedLayout& l, bool check_src) {
  return l.ndim == 0 || (l.ndim == 1 && l.dst_stride[0] == 1 && (!check_src || l.src_stride[0] == 1));
}

// Enough blocks to fill the device a few times over; grid-stride loops take the rest.
int grid_for(int64_t items, int device) {
  const int64_t cap = int64_t(cuda_device_props(device).sm_count) * 8;
  return int(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, cap));
}

__device__ __forceinline__ int64_t global_thread() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return int64_t(gridDim.x) * blockDim.x; }

// Offsets of element i (row-major order over l.shape) in the destination and the source.
__device__ __forceinline__ void strided_offsets(const StridedLayout& l, int64_t i, int64_t* dst_off, int64_t* src_off) {
  int64_t d = 0, s = 0;
  for (int k = l.ndim - 1; k >= 0; --k) {
    const int64_t idx = i % l.shape[k];
    i /= l.shape[k];
    d += idx * l.dst_stride[k];
    s += idx * l.src_stride[k];
  }
  *dst_off = d;
  *src_off = s;
}

template <typename A, typename B>
constexpr int kPackOf = kPack16<std::conditional_t<(sizeof(A) > sizeof(B)), A, B>>;

// ---------------------------------------------------------------------------------------------------
// Copy and convert
// ---------------------------------------------------------------------------------------------------

// dst[i] = convert(src[i]) over n dense elements, kVec at a time (kVec = 1: no alignment needed).
template <typename Dst, typename Src, int kVec>
__global__ void copy_dense_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, int64_t n) {
  const int64_t packs = n / kVec;
  for (int64_t p = global_thread(); p < packs; p += grid_threads()) {
    const auto in = load_pack<Pack<Src, kVec>>(src + p * kVec);
    Pack<Dst, kVec> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) out.v[j] = device_convert<Dst>(in.v[j]);
    store_pack(dst + p * kVec, out);
  }
  for (int64_t i = packs * kVec + global_thread(); i < n; i += grid_threads()) dst[i] = device_convert<Dst>(src[i]);
}

// Any strides on either side; one element per thread and step.
template <typename Dst, typename Src>
__global__ void copy_strided_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, StridedLayout l, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t d, s;
    strided_offsets(l, i, &d, &s);
    dst[d] = device_convert<Dst>(src[s]);
  }
}

template <typename Dst, typename Src>
void launch_copy(const Tensor& dst, const Tensor& src, const StridedLayout& l, int device, cudaStream_t stream) {
  Dst* d = static_cast<Dst*>(dst.raw_data());
  const Src* s = static_cast<const Src*>(src.raw_data());
  const int64_t n = dst.numel();
  if (!is_dense(l, true)) {
    const int grid = grid_for(n, device);
    copy_strided_kernel<Dst, Src><<<grid, kThreads, 0, stream>>>(d, s, l, n);
    HYB_CUDA_LAUNCH_CHECK("copy_strided_kernel", grid, kThreads, 0);
    return;
  }
  constexpr int kVec = kPackOf<Dst, Src>;
  if (is_aligned(d, 16) && is_aligned(s, 16)) {
    const int grid = grid_for(n / kVec + 1, device);
    copy_dense_kernel<Dst, Src, kVec><<<grid, kThreads, 0, stream>>>(d, s, n);
    HYB_CUDA_LAUNCH_CHECK("copy_dense_kernel", grid, kThreads, 0);
  } else {
    const int grid = grid_for(n, device);
    copy_dense_kernel<Dst, Src, 1><<<grid, kThreads, 0, stream>>>(d, s, n);
    HYB_CUDA_LAUNCH_CHECK("copy_dense_kernel", grid, kThreads, 0);
  }
}

void copy_on_device(const Tensor& dst, const Tensor& src) {
  const int device = dst.device().index;
  CudaDeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    if (dst.raw_data() != src.raw_data())
      HYB_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const StridedLayout l = collapse("cuda_copy", dst, &src);
  visit_dtype(dst.dtype(), [&](auto dt) {
    visit_dtype(src.dtype(), [&](auto st) { launch_copy<decltype(dt), decltype(st)>(dst, src, l, device, stream); });
  });
}

// The destination's stream waits for the source device to finish, then pulls over the peer link (or
// through the host when there is none; the driver chooses). Synchronised at the end: the contiguous
// source made here must outlive the transfer, and it belongs to the other device's allocator.
void copy_between_devices(const Tensor& dst, const Tensor& src) {
  const int src_device = src.device().index, dst_device = dst.device().index;
  Tensor s = src.contiguous();
  const bool direct = dst.is_contiguous() && dst.dtype() == s.dtype();
  Tensor staged = direct ? dst : Tensor::empty(s.shape(), s.dtype(), dst.device());
  cuda_synchronize(src_device);
  {
    CudaDeviceGuard guard(dst_device);
    HYB_CUDA_CHECK(cudaMemcpyPeerAsync(staged.raw_data(), dst_device, s.raw_data(), src_device, s.nbytes(),
                                       current_stream(dst_device)));
  }
  if (!direct) copy_on_device(dst, staged);
  cuda_synchronize(dst_device);
}

void copy_host_to_device(const Tensor& dst, const Tensor& src) {
  const int device = dst.device().index;
  Tensor s = src.contiguous();
  const bool direct = dst.is_contiguous() && dst.dtype() == s.dtype();
  Tensor staged = direct ? dst : Tensor::empty(s.shape(), s.dtype(), dst.device());
  {
    CudaDeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    HYB_CUDA_CHECK(cudaMemcpyAsync(staged.raw_data(), s.raw_data(), s.nbytes(), cudaMemcpyHostToDevice, stream));
    HYB_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  if (!direct) copy_on_device(dst, staged);
}

void copy_device_to_host(const Tensor& dst, const Tensor& src) {
  const int device = src.device().index;
  Tensor s = src;
  if (s.dtype() != dst.dtype() || !s.is_contiguous()) {
    s = Tensor::empty(src.shape(), dst.dtype(), src.device());
    copy_on_device(s, src);
  }
  Tensor h = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype());
  {
    CudaDeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    HYB_CUDA_CHECK(cudaMemcpyAsync(h.raw_data(), s.raw_data(), s.nbytes(), cudaMemcpyDeviceToHost, stream));
    HYB_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  if (!h.same_storage(dst)) dst.copy_(h);
}

// ---------------------------------------------------------------------------------------------------
// Fill
// ---------------------------------------------------------------------------------------------------

template <typename T, int kVec>
__global__ void fill_dense_kernel(T* __restrict__ dst, T value, int64_t n) {
  const int64_t packs = n / kVec;
  Pack<T, kVec> v;
#pragma unroll
  for (int j = 0; j < kVec; ++j) v.v[j] = value;
  for (int64_t p = global_thread(); p < packs; p += grid_threads()) store_pack(dst + p * kVec, v);
  for (int64_t i = packs * kVec + global_thread(); i < n; i += grid_threads()) dst[i] = value;
}

template <typename T>
__global__ void fill_strided_kernel(T* __restrict__ dst, T value, StridedLayout l, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t d, unused;
    strided_offsets(l, i, &d, &unused);
    dst[d] = value;
  }
}

// ---------------------------------------------------------------------------------------------------
// add_, scale_
// ---------------------------------------------------------------------------------------------------

// dst[i] = dst[i] + alpha * src[i] in fp64, rounded once per operation like the CPU loop (no FMA).
template <typename D, typename S, int kVec>
__global__ void add_kernel(D* __restrict__ dst, const S* __restrict__ src, double alpha, int64_t n) {
  auto add = [alpha](D d, S s) {
    return device_convert<D>(__dadd_rn(device_convert<double>(d), __dmul_rn(alpha, device_convert<double>(s))));
  };
  const int64_t packs = n / kVec;
  for (int64_t p = global_thread(); p < packs; p += grid_threads()) {
    auto d = load_pack<Pack<D, kVec>>(dst + p * kVec);
    const auto s = load_pack<Pack<S, kVec>>(src + p * kVec);
#pragma unroll
    for (int j = 0; j < kVec; ++j) d.v[j] = add(d.v[j], s.v[j]);
    store_pack(dst + p * kVec, d);
  }
  for (int64_t i = packs * kVec + global_thread(); i < n; i += grid_threads()) dst[i] = add(dst[i], src[i]);
}

template <typename T, int kVec>
__global__ void scale_kernel(T* __restrict__ x, double s, int64_t n) {
  const int64_t packs = n / kVec;
  for (int64_t p = global_thread(); p < packs; p += grid_threads()) {
    auto v = load_pack<Pack<T, kVec>>(x + p * kVec);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v.v[j] = device_convert<T>(__dmul_rn(device_convert<double>(v.v[j]), s));
    store_pack(x + p * kVec, v);
  }
  for (int64_t i = packs * kVec + global_thread(); i < n; i += grid_threads())
    x[i] = device_convert<T>(__dmul_rn(device_convert<double>(x[i]), s));
}

// ---------------------------------------------------------------------------------------------------
// Sum of squares
// ---------------------------------------------------------------------------------------------------

// Up to kSumSquaresBatch tensors of one dtype and alignment in one launch (the table travels in the
// kernel's parameters, so no copy from the host waits for the stream): tensor i owns blocks
// [first[i], first[i + 1]), the grid it would get alone.
constexpr int kSumSquaresBatch = 64;
template <typename T>
struct SumSquaresBatch {
  const T* x[kSumSquaresBatch];
  int64_t n[kSumSquaresBatch];
  int first[kSumSquaresBatch + 1];
  int count;
};

// One partial per block: grid-stride accumulation over its tensor in Acc (fp32, or fp64 for f64
// input), then a block reduction, stored as fp64 (exactly). The host adds each tensor's partials in
// fp64; at most 2 blocks per SM a tensor keeps those lists short.
template <typename T, typename Acc, int kVec>
__global__ void sum_squares_partials_kernel(SumSquaresBatch<T> batch, double* __restrict__ partials) {
  int i = 0;
  while (i + 1 < batch.count && int(blockIdx.x) >= batch.first[i + 1]) ++i;
  const T* __restrict__ x = batch.x[i];
  const int64_t n = batch.n[i];
  const int64_t start = int64_t(blockIdx.x - batch.first[i]) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(batch.first[i + 1] - batch.first[i]) * blockDim.x;
  Acc acc = 0;
  const int64_t packs = n / kVec;
  for (int64_t p = start; p < packs; p += stride) {
    const auto v = load_pack<Pack<T, kVec>>(x + p * kVec);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const Acc a = device_convert<Acc>(v.v[j]);
      acc += a * a;
    }
  }
  for (int64_t k = packs * kVec + start; k < n; k += stride) {
    const Acc a = device_convert<Acc>(x[k]);
    acc += a * a;
  }
  acc = block_reduce_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = double(acc);
}

}  // namespace

void cuda_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.is_cuda() && src.is_cuda())
    return dst.device() == src.device() ? copy_on_device(dst, src) : copy_between_devices(dst, src);
  if (dst.is_cuda()) return copy_host_to_device(dst, src);
  copy_device_to_host(dst, src);
}

void cuda_fill(const Tensor& t, double value) {
  if (t.numel() == 0) return;
  const int device = t.device().index;
  CudaDeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = convert<T>(value);
    T* p = static_cast<T*>(t.raw_data());
    const int64_t n = t.numel();
    if (!t.is_contiguous()) {
      const StridedLayout l = collapse("cuda_fill", t, nullptr);
      const int grid = grid_for(n, device);
      fill_strided_kernel<T><<<grid, kThreads, 0, stream>>>(p, v, l, n);
      HYB_CUDA_LAUNCH_CHECK("fill_strided_kernel", grid, kThreads, 0);
      return;
    }
    const T zero{};
    if (std::memcmp(&v, &zero, sizeof(T)) == 0) {
      HYB_CUDA_CHECK(cudaMemsetAsync(p, 0, t.nbytes(), stream));
      return;
    }
    constexpr int kVec = kPack16<T>;
    if (is_aligned(p, 16)) {
      const int grid = grid_for(n / kVec + 1, device);
      fill_dense_kernel<T, kVec><<<grid, kThreads, 0, stream>>>(p, v, n);
      HYB_CUDA_LAUNCH_CHECK("fill_dense_kernel", grid, kThreads, 0);
    } else {
      const int grid = grid_for(n, device);
      fill_dense_kernel<T, 1><<<grid, kThreads, 0, stream>>>(p, v, n);
      HYB_CUDA_LAUNCH_CHECK("fill_dense_kernel", grid, kThreads, 0);
    }
  });
}

void cuda_add_(const Tensor& dst, const Tensor& src, double alpha) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int device = dst.device().index;
  CudaDeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  visit_dtype(dst.dtype(), [&](auto dt) {
    visit_dtype(src.dtype(), [&](auto st) {
      using D = decltype(dt);
      using S = decltype(st);
      D* d = static_cast<D*>(dst.raw_data());
      const S* s = static_cast<const S*>(src.raw_data());
      constexpr int kVec = kPackOf<D, S>;
      if (is_aligned(d, 16) && is_aligned(s, 16)) {
        const int grid = grid_for(n / kVec + 1, device);
        add_kernel<D, S, kVec><<<grid, kThreads, 0, stream>>>(d, s, alpha, n);
        HYB_CUDA_LAUNCH_CHECK("add_kernel", grid, kThreads, 0);
      } else {
        const int grid = grid_for(n, device);
        add_kernel<D, S, 1><<<grid, kThreads, 0, stream>>>(d, s, alpha, n);
        HYB_CUDA_LAUNCH_CHECK("add_kernel", grid, kThreads, 0);
      }
    });
  });
}

void cuda_scale_(const Tensor& t, double s) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int device = t.device().index;
  CudaDeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.raw_data());
    constexpr int kVec = kPack16<T>;
    if (is_aligned(p, 16)) {
      const int grid = grid_for(n / kVec + 1, device);
      scale_kernel<T, kVec><<<grid, kThreads, 0, stream>>>(p, s, n);
      HYB_CUDA_LAUNCH_CHECK("scale_kernel", grid, kThreads, 0);
    } else {
      const int grid = grid_for(n, device);
      scale_kernel<T, 1><<<grid, kThreads, 0, stream>>>(p, s, n);
      HYB_CUDA_LAUNCH_CHECK("scale_kernel", grid, kThreads, 0);
    }
  });
}

std::vector<double> cuda_sum_squares_each(const std::vector<Tensor>& ts) {
  std::vector<double> sums(ts.size(), 0.0);
  if (ts.empty()) return sums;
  const int device = ts[0].device().index;
  CudaDeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  const int max_grid = 2 * cuda_device_props(device).sm_count;
  // Every tensor's partials in one buffer, so the whole list costs one copy to the host and a few
  // launches: the grid each tensor gets is the one it would get alone.
  std::vector<int64_t> first(ts.size() + 1, 0);
  for (size_t i = 0; i < ts.size(); ++i) {
    const int64_t n = ts[i].numel();
    int64_t items = 0;
    visit_dtype(ts[i].dtype(), [&](auto tag) {
      using T = decltype(tag);
      items = is_aligned(ts[i].raw_data(), 16) ? n / kPack16<T> + 1 : n;
    });
    first[i + 1] = first[i] + (n ? std::min<int64_t>((items + kThreads - 1) / kThreads, max_grid) : 0);
  }
  if (first.back() == 0) return sums;
  Tensor partials = Tensor::empty({first.back()}, DType::f64, ts[0].device());
  // Runs of tensors with one dtype and alignment go out in batches.
  for (size_t lo = 0; lo < ts.size();) {
    const DType dt = ts[lo].dtype();
    const bool aligned = is_aligned(ts[lo].raw_data(), 16);
    size_t hi = lo;
    while (hi < ts.size() && hi - lo < kSumSquaresBatch && ts[hi].dtype() == dt &&
           is_aligned(ts[hi].raw_data(), 16) == aligned)
      ++hi;
    visit_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
      SumSquaresBatch<T> batch{};
      batch.count = 0;
      for (size_t i = lo; i < hi; ++i) {
        if (ts[i].numel() == 0) continue;
        batch.x[batch.count] = static_cast<const T*>(ts[i].raw_data());
        batch.n[batch.count] = ts[i].numel();
        batch.first[batch.count] = int(first[i] - first[lo]);
        batch.first[++batch.count] = int(first[i + 1] - first[lo]);
      }
      const int grid = int(first[hi] - first[lo]);
      if (grid == 0) return;
      double* out = partials.data<double>() + first[lo];
      if (aligned) {
        sum_squares_partials_kernel<T, Acc, kPack16<T>><<<grid, kThreads, 0, stream>>>(batch, out);
      } else {
        sum_squares_partials_kernel<T, Acc, 1><<<grid, kThreads, 0, stream>>>(batch, out);
      }
      HYB_CUDA_LAUNCH_CHECK("sum_squares_partials_kernel", grid, kThreads, 0);
    });
    lo = hi;
  }
  const std::vector<double> host = partials.to_double_vector();
  for (size_t i = 0; i < ts.size(); ++i)
    for (int64_t k = first[i]; k < first[i + 1]; ++k) sums[i] += host[size_t(k)];
  return sums;
}

}  // namespace hyb
