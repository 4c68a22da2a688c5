// The elementwise launch the ops' CUDA kernels share (unary, binary, dropout): a fresh contiguous
// output y = f(x_1, ..., x_k) over operands of y's shape, each with any strides (0 along broadcast
// dims). The dims are merged first (contiguous inputs become one dim), then two paths: when every
// input is contiguous or constant along the innermost dim, a grid-stride loop over 16-byte packs (the
// copy kernel's access pattern, so contiguous inputs and bias adds run near copy bandwidth); otherwise
// (transposed views) one element per thread and step. Operand offsets come from the row-major index
// by dividing through the merged dims with precomputed multipliers (Granlund-Montgomery, as PyTorch's
// IntDivider) on 32-bit indices, a few instructions each; tensors of 2^31 elements or more divide in 64 bits.
//   map_cuda<T>("silu_forward_kernel", x.shape(), {x}, SiluForward{});
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>

#include "autograd/ops/broadcast.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/vector_io.cuh"

namespace hyb {

constexpr int kElementwiseThreads = 256;
constexpr int kMaxMergedDims = 8;

// n / d and n % d for a fixed d > 0. The 32-bit form: q = (umulhi(n, m) + n) >> s, exact for n < 2^31
// (Granlund and Montgomery 1994, section 4); the 64-bit form divides.
template <typename Index>
struct Divmod {
  Index d = 1;
  uint32_t m = 0, s = 0;

  Divmod() = default;
  explicit Divmod(Index divisor) : d(divisor) {
    if constexpr (std::is_same_v<Index, uint32_t>) {
      while ((uint64_t(1) << s) < d) ++s;
      m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << s) - d)) / d + 1);
    }
  }
  __device__ __forceinline__ Index div(Index n) const {
    if constexpr (std::is_same_v<Index, uint32_t>) {
      return (__umulhi(n, m) + n) >> s;
    } else {
      return n / d;
    }
  }
};

// N operands walked together in y's row-major order: dims inner to outer after dropping size-1 dims
// and merging neighbours that are contiguous in every operand (a (B, T, C) + (C,) bias add becomes
// (B*T, C) with strides {C, 1} and {0, 1}).
template <int N, typename Index>
struct StridedOffsets {
  int ndim = 0;
  Divmod<Index> size[kMaxMergedDims];
  int64_t stride[kMaxMergedDims][N] = {};

  // Element i's offset in each operand.
  __device__ __forceinline__ void at(Index i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxMergedDims; ++d) {
      if (d == ndim) break;
      Index idx = i;
      if (d + 1 < ndim) {  // the outermost dim needs no division
        const Index q = size[d].div(i);
        idx = i - q * size[d].d;
        i = q;
      }
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += int64_t(idx) * stride[d][k];
    }
  }
};

// The merged layout of `shape` under N stride lists; throws naming `op` past kMaxMergedDims dims.
template <int N, typename Index>
StridedOffsets<N, Index> merge_dims(const char* op, const Shape& shape, const std::array<Shape, N>& strides) {
  StridedOffsets<N, Index> l;
  int64_t merged_size = 0;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    const int64_t n = shape[size_t(d)];
    if (n == 1) continue;
    bool merge = l.ndim > 0;
    for (int k = 0; k < N && merge; ++k) merge = strides[k][size_t(d)] == l.stride[l.ndim - 1][k] * merged_size;
    if (merge) {
      merged_size *= n;
      l.size[l.ndim - 1] = Divmod<Index>(Index(merged_size));
      continue;
    }
    HYB_CHECK(l.ndim < kMaxMergedDims, op, ": ", shape_str(shape), " has more than ", kMaxMergedDims,
              " dimensions that cannot be merged; the CUDA elementwise kernels take at most ", kMaxMergedDims);
    merged_size = n;
    l.size[l.ndim] = Divmod<Index>(Index(n));
    for (int k = 0; k < N; ++k) l.stride[l.ndim][k] = strides[k][size_t(d)];
    ++l.ndim;
  }
  return l;
}

template <typename T, int NIn>
struct MapOperands {
  T* y;
  const T* x[NIn];
};

template <typename F, int NIn>
__device__ __forceinline__ float apply_map(const F& f, const float (&v)[NIn]) {
  static_assert(NIn >= 1 && NIn <= 3, "map functors take one to three operands");
  if constexpr (NIn == 1) {
    return f(v[0]);
  } else if constexpr (NIn == 2) {
    return f(v[0], v[1]);
  } else {
    return f(v[0], v[1], v[2]);
  }
}

// y = f(x...), 16-byte packs of kVec elements: every input is either contiguous along the innermost
// merged dim (loaded as a pack) or constant along it (bit k of `splat`: one element, repeated), so a
// bias add moves packs like a copy. A thread takes kMapUnroll packs a grid stride apart per step and
// issues all their loads before any math, so twice the bytes are in flight that one pack per step
// gives (with one pack per step, silu and the bias add measured 75% and 71% of the copy). The
// layout's division chain runs once per pack. The tail of n % kVec elements (only when the layout
// is one dim) goes one at a time.
constexpr int kMapUnroll = 2;

template <typename T, int kVec, int NIn, typename F, typename Index>
__global__ void map_packed_kernel(MapOperands<T, NIn> o, StridedOffsets<NIn + 1, Index> l, Index n, unsigned splat,
                                  F f) {
  using P = Pack<T, kVec>;
  const Index stride = Index(gridDim.x) * blockDim.x;
  const Index packs = n / kVec;
  for (Index p0 = Index(blockIdx.x) * blockDim.x + threadIdx.x; p0 < packs; p0 += kMapUnroll * stride) {
    P in[kMapUnroll][NIn];
#pragma unroll
    for (int u = 0; u < kMapUnroll; ++u) {
      const Index p = p0 + Index(u) * stride;
      if (p >= packs) break;
      int64_t off[NIn + 1];
      l.at(p * kVec, off);
#pragma unroll
      for (int k = 0; k < NIn; ++k) {
        if ((splat >> k) & 1u) {
          const T v = o.x[k][off[k + 1]];
#pragma unroll
          for (int j = 0; j < kVec; ++j) in[u][k].v[j] = v;
        } else {
          in[u][k] = load_pack<P>(o.x[k] + off[k + 1]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kMapUnroll; ++u) {
      const Index p = p0 + Index(u) * stride;
      if (p >= packs) break;
      P out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        float v[NIn];
#pragma unroll
        for (int k = 0; k < NIn; ++k) v[k] = to_f32(in[u][k].v[j]);
        out.v[j] = from_f32<T>(apply_map(f, v));
      }
      store_pack(o.y + int64_t(p) * kVec, out);
    }
  }
  for (Index i = packs * kVec + Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[NIn + 1];
    l.at(i, off);
    float v[NIn];
#pragma unroll
    for (int k = 0; k < NIn; ++k) v[k] = to_f32(o.x[k][off[k + 1]]);
    o.y[i] = from_f32<T>(apply_map(f, v));
  }
}

// One element per thread and step, operands of any strides; y (operand 0 of the layout) is contiguous.
template <typename T, int NIn, typename F, typename Index>
__global__ void map_strided_kernel(MapOperands<T, NIn> o, StridedOffsets<NIn + 1, Index> l, Index n, F f) {
  const Index stride = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[NIn + 1];
    l.at(i, off);
    float v[NIn];
#pragma unroll
    for (int k = 0; k < NIn; ++k) v[k] = to_f32(o.x[k][off[k + 1]]);
    o.y[off[0]] = from_f32<T>(apply_map(f, v));
  }
}

// Bit k set when input k is constant along the layout's innermost dim; false when some input is
// neither constant nor packable there (unit stride, 16-byte aligned, outer strides whole packs), or
// the innermost dim would split packs between rows.
template <typename T, int NIn, typename Index>
bool packable(const MapOperands<T, NIn>& o, const StridedOffsets<NIn + 1, Index>& l, unsigned* splat) {
  constexpr int kVec = kPack16<T>;
  *splat = 0;
  if (!is_aligned(o.y, 16) || (l.ndim > 1 && l.size[0].d % kVec != 0)) return false;
  for (int k = 0; k < NIn; ++k) {
    const int64_t inner = l.ndim > 0 ? l.stride[0][k + 1] : 0;
    if (inner == 0) {
      *splat |= 1u << k;
      continue;
    }
    if (inner != 1 || !is_aligned(o.x[k], 16)) return false;
    for (int d = 1; d < l.ndim; ++d)
      if (l.stride[d][k + 1] % kVec != 0) return false;
  }
  return true;
}

// y = f(x...) as a new contiguous tensor of `shape`; each input broadcasts to `shape`. `kernel` names
// the op in launch errors. F is a functor with a __device__ float operator()(float...). Tensors of
// 2^31 elements or more take the one-element path with 64-bit division (slow, and rare).
template <typename T, size_t NIn, typename F>
Tensor map_cuda(const char* kernel, const Shape& shape, const std::array<Tensor, NIn>& inputs, F f) {
  constexpr int K = int(NIn);
  const Device device = inputs[0].device();
  Tensor y = Tensor::empty(shape, inputs[0].dtype(), device);
  const int64_t n = y.numel();
  if (n == 0) return y;
  CudaDeviceGuard guard(device.index);
  cudaStream_t stream = current_stream(device.index);
  MapOperands<T, K> o;
  o.y = y.data<T>();
  std::array<Tensor, NIn> x;
  std::array<Shape, NIn + 1> strides;
  strides[0] = y.strides();
  for (size_t k = 0; k < NIn; ++k) {
    x[k] = expand_view(inputs[k], shape, kernel);
    o.x[k] = x[k].template data<T>();
    strides[k + 1] = x[k].strides();
  }
  if (n >= (int64_t(1) << 31)) {
    const auto l = merge_dims<K + 1, uint64_t>(kernel, shape, strides);
    auto k = map_strided_kernel<T, K, F, uint64_t>;
    const int grid = grid_blocks_for(k, n, kElementwiseThreads, 0, device.index);
    k<<<grid, kElementwiseThreads, 0, stream>>>(o, l, uint64_t(n), f);
    HYB_CUDA_LAUNCH_CHECK(kernel, grid, kElementwiseThreads, 0);
    return y;
  }
  const auto l = merge_dims<K + 1, uint32_t>(kernel, shape, strides);
  unsigned splat = 0;
  if (packable(o, l, &splat)) {
    constexpr int kVec = kPack16<T>;
    auto k = map_packed_kernel<T, kVec, K, F, uint32_t>;
    const int grid = grid_blocks_for(k, n / kVec + 1, kElementwiseThreads, 0, device.index);
    k<<<grid, kElementwiseThreads, 0, stream>>>(o, l, uint32_t(n), splat, f);
    HYB_CUDA_LAUNCH_CHECK(kernel, grid, kElementwiseThreads, 0);
  } else {
    auto k = map_strided_kernel<T, K, F, uint32_t>;
    const int grid = grid_blocks_for(k, n, kElementwiseThreads, 0, device.index);
    k<<<grid, kElementwiseThreads, 0, stream>>>(o, l, uint32_t(n), f);
    HYB_CUDA_LAUNCH_CHECK(kernel, grid, kElementwiseThreads, 0);
  }
  return y;
}

}  // namespace hyb
