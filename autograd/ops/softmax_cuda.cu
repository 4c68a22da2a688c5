// CUDA softmax, log_softmax and logsumexp over the last dim (softmax.h has the equations), statistics
// in fp32. A row is read from global memory once, reduced (max, then the sum of exp(x - shift)) with
// shuffles, and written once; the passes in between read a copy of the row kept close:
//   warp rows  (V <= 512): a warp per row, 8 rows to a 256-thread block, the row in the lanes' registers;
//   block rows (V > 512):  a block of up to 1024 threads per row, the row in dynamic shared memory
//              (a 50304-wide bf16 row is 100 KB: two blocks to an SM). Past the opt-in shared memory
//              (about 58K f32 or 116K bf16 elements, half that for the two-array backward) the passes
//              read global memory again instead.
// Each thread reads back only the packs it stored itself, so filling the cache needs no barrier.
// The shift is the row max when finite and 0 otherwise, the CPU's rule, which gives an all -inf row
// logsumexp -inf and a +inf entry +inf. The forward's exps use the __expf intrinsic (ex2.approx:
// about 1e-6 relative for arguments down to -20, exact 0 and inf at the ends): with two IEEE expf an
// element (some 20 instructions each) the 50304-wide rows ran at 68% of the copy bandwidth, the
// compute phases between a block's loads being the likely limit. Inputs are made contiguous first; 16-byte packs when V and the
// pointers allow.
#include <algorithm>
#include <limits>
#include <type_traits>

#include "autograd/ops/softmax_cuda.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "kernels/vector_io.cuh"

namespace hyb {
namespace {

enum class RowOut { softmax, log_softmax, logsumexp };

constexpr int kWarpRowMax = 512;      // V up to which a warp owns a row
constexpr int kWarpRowBlock = 256;    // threads of a block of warp rows (8 rows)
constexpr int kBlockRowMax = 1024;    // threads owning one longer row, at most
constexpr int kPacksPerThread = 4;    // block rows: threads = packs / this, rounded to warps

template <bool kWarpRows>
constexpr int max_block_threads() {
  return kWarpRows ? kWarpRowBlock : kBlockRowMax;
}

__device__ __forceinline__ float neg_inf() { return -std::numeric_limits<float>::infinity(); }

template <bool kWarpRows, typename Op>
__device__ __forceinline__ float row_reduce(float v, Op op, float identity) {
  if constexpr (kWarpRows) {
    return warp_reduce(v, op);
  } else {
    return block_reduce(v, op, identity);
  }
}

// One thread's share of NA rows of one length (x; or y and dy) in a warp row: packs lane, lane + 32, ...
// of each, held in registers. for_each<true> loads them (the first pass); later passes reuse them.
template <typename T, int kVec, int NA>
struct WarpRowSlices {
  using P = Pack<T, kVec>;
  static constexpr int kCache = kWarpRowMax / (kWarpSize * kVec);
  const T* row[NA];
  int64_t packs;
  int lane;
  P cache[kCache][NA];

  // f(const P (&v)[NA], int64_t pack) over this thread's packs.
  template <bool kFill, typename F>
  __device__ __forceinline__ void for_each(F&& f) {
#pragma unroll
    for (int c = 0; c < kCache; ++c) {
      const int64_t p = lane + int64_t(c) * kWarpSize;
      if (p >= packs) break;
      if constexpr (kFill) {
#pragma unroll
        for (int a = 0; a < NA; ++a) cache[c][a] = load_pack<P>(row[a] + p * kVec);
      }
      f(cache[c], p);
    }
  }
};

// The same for a block row: packs threadIdx.x, + blockDim.x, ... The copy lives in shared memory,
// s_cache (NA, packs), or nowhere (s_cache null): then every pass reads global memory.
template <typename T, int kVec, int NA>
struct BlockRowSlices {
  using P = Pack<T, kVec>;
  const T* row[NA];
  int64_t packs;
  int lane;
  P* s_cache;

  // The filling pass issues kFillPacks packs' loads before it stores or uses any of them, so a thread
  // has that many in flight (with the row cached, the only pass that reads global memory); f still
  // sees the packs in the order lane, lane + blockDim.x, ..., so the results are unchanged. (The
  // scalar fallback keeps one: ptxas spilled the f32 one at four.)
  static constexpr int kFillPacks = kVec > 1 ? 4 / NA : 1;

  template <bool kFill, typename F>
  __device__ __forceinline__ void for_each(F&& f) {
    if constexpr (kFill) {
      for (int64_t p0 = lane; p0 < packs; p0 += int64_t(kFillPacks) * blockDim.x) {
        P v[kFillPacks][NA];
#pragma unroll
        for (int u = 0; u < kFillPacks; ++u) {
          const int64_t p = p0 + int64_t(u) * blockDim.x;
          if (p < packs)
#pragma unroll
            for (int a = 0; a < NA; ++a) v[u][a] = load_pack<P>(row[a] + p * kVec);
        }
#pragma unroll
        for (int u = 0; u < kFillPacks; ++u) {
          const int64_t p = p0 + int64_t(u) * blockDim.x;
          if (p >= packs) break;
          if (s_cache)
#pragma unroll
            for (int a = 0; a < NA; ++a) s_cache[a * packs + p] = v[u][a];
          f(v[u], p);
        }
      }
    } else {
      for (int64_t p = lane; p < packs; p += blockDim.x) {
        P v[NA];
#pragma unroll
        for (int a = 0; a < NA; ++a) v[a] = s_cache ? s_cache[a * packs + p] : load_pack<P>(row[a] + p * kVec);
        f(v, p);
      }
    }
  }
};

template <typename T, int kVec, bool kWarpRows, int NA>
using RowSlices = std::conditional_t<kWarpRows, WarpRowSlices<T, kVec, NA>, BlockRowSlices<T, kVec, NA>>;

// The slices of row `row` of the NA arrays (each (rows, V)), or false for the spare warps of the
// last block of warp rows. Block rows take their row from blockIdx.x.
template <typename T, int kVec, bool kWarpRows, int NA>
__device__ __forceinline__ bool row_slices(const T* const (&arrays)[NA], int64_t rows, int64_t V, bool cached,
                                           RowSlices<T, kVec, kWarpRows, NA>* s, int64_t* row) {
  extern __shared__ uint4 s_row_cache[];  // block rows: (NA, V / kVec) packs when cached
  if constexpr (kWarpRows) {
    s->lane = int(threadIdx.x % kWarpSize);
    *row = int64_t(blockIdx.x) * (kWarpRowBlock / kWarpSize) + threadIdx.x / kWarpSize;
  } else {
    s->lane = int(threadIdx.x);
    *row = blockIdx.x;
    s->s_cache = cached ? reinterpret_cast<Pack<T, kVec>*>(s_row_cache) : nullptr;
  }
  s->packs = V / kVec;
#pragma unroll
  for (int a = 0; a < NA; ++a) s->row[a] = arrays[a] + *row * V;
  return *row < rows;
}

// ---------------------------------------------------------------------------------------------------
// Forward: softmax, log_softmax (y, the row's shape) or logsumexp (lse, one value per row).
// x, y: (rows, V) contiguous; lse: (rows,). Warp rows: ceil(rows / 8) blocks of 256; block rows: rows blocks.
// ---------------------------------------------------------------------------------------------------
template <typename T, int kVec, bool kWarpRows>
__global__ void __launch_bounds__(max_block_threads<kWarpRows>())
    softmax_forward_kernel(const T* __restrict__ x, T* __restrict__ y, T* __restrict__ lse, int64_t rows, int64_t V,
                           RowOut out, bool cached) {
  using P = Pack<T, kVec>;
  RowSlices<T, kVec, kWarpRows, 1> xs;
  int64_t row;
  if (!row_slices<T, kVec, kWarpRows, 1>({x}, rows, V, cached, &xs, &row)) return;  // whole warps
  float m = neg_inf();  // fmaxf skips NaN here; a NaN still poisons the sum below
  xs.template for_each<true>([&](const P(&v)[1], int64_t) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) m = fmaxf(m, to_f32(v[0].v[j]));
  });
  m = row_reduce<kWarpRows>(m, MaxOp{}, neg_inf());
  const float shift = isfinite(m) ? m : 0.f;
  float s = 0.f;
  xs.template for_each<false>([&](const P(&v)[1], int64_t) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) s += __expf(to_f32(v[0].v[j]) - shift);
  });
  s = row_reduce<kWarpRows>(s, SumOp{}, 0.f);
  const float l = shift + logf(s);
  if (out == RowOut::logsumexp) {
    if (xs.lane == 0) lse[row] = from_f32<T>(l);
    return;
  }
  const float inv = 1.f / s;
  T* yr = y + row * V;
  xs.template for_each<false>([&](const P(&v)[1], int64_t p) {
    P o;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float xv = to_f32(v[0].v[j]);
      o.v[j] = from_f32<T>(out == RowOut::log_softmax ? xv - l : __expf(xv - shift) * inv);
    }
    store_pack(yr + p * kVec, o);
  });
}

// ---------------------------------------------------------------------------------------------------
// Backward of softmax (dx = y (dy - sum dy y)) and log_softmax (dx = dy - exp(y) sum dy).
// y, dy, dx: (rows, V) contiguous; the forward's grid.
// ---------------------------------------------------------------------------------------------------
template <typename T, int kVec, bool kWarpRows>
__global__ void __launch_bounds__(max_block_threads<kWarpRows>())
    softmax_backward_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                            int64_t V, bool log, bool cached) {
  using P = Pack<T, kVec>;
  RowSlices<T, kVec, kWarpRows, 2> rs;
  int64_t row;
  if (!row_slices<T, kVec, kWarpRows, 2>({y, dy}, rows, V, cached, &rs, &row)) return;
  float s = 0.f;
  rs.template for_each<true>([&](const P(&v)[2], int64_t) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float g = to_f32(v[1].v[j]);
      s += log ? g : g * to_f32(v[0].v[j]);
    }
  });
  s = row_reduce<kWarpRows>(s, SumOp{}, 0.f);
  T* dr = dx + row * V;
  rs.template for_each<false>([&](const P(&v)[2], int64_t p) {
    P o;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float yv = to_f32(v[0].v[j]), g = to_f32(v[1].v[j]);
      o.v[j] = from_f32<T>(log ? g - expf(yv) * s : yv * (g - s));
    }
    store_pack(dr + p * kVec, o);
  });
}

// ---------------------------------------------------------------------------------------------------
// Backward of logsumexp: dx = dlse softmax(x). softmax is rebuilt as exp(x - lse) / sum_j exp(x_j - lse):
// the divisor is within rounding of 1, but it cancels the error of a bf16 lse (8 bits: 0.03 near
// lse = 10, a 3% error in every exp(x - lse)). An all -inf row (lse -inf) gets 0; an lse of +inf or
// NaN goes through exp(x - lse) undivided, as on the CPU. x, dx: (rows, V); lse, dlse: (rows,).
// ---------------------------------------------------------------------------------------------------
template <typename T, int kVec, bool kWarpRows>
__global__ void __launch_bounds__(max_block_threads<kWarpRows>())
    logsumexp_backward_kernel(const T* __restrict__ x, const T* __restrict__ lse, const T* __restrict__ dlse,
                              T* __restrict__ dx, int64_t rows, int64_t V, bool cached) {
  using P = Pack<T, kVec>;
  RowSlices<T, kVec, kWarpRows, 1> xs;
  int64_t row;
  if (!row_slices<T, kVec, kWarpRows, 1>({x}, rows, V, cached, &xs, &row)) return;
  const float l = to_f32(lse[row]), g = to_f32(dlse[row]);
  T* dr = dx + row * V;
  if (l == neg_inf()) {  // uniform over the row's threads: a block row leaves whole
    P zero;
#pragma unroll
    for (int j = 0; j < kVec; ++j) zero.v[j] = from_f32<T>(0.f);
    const int step = kWarpRows ? kWarpSize : int(blockDim.x);
    for (int64_t p = xs.lane; p < xs.packs; p += step) store_pack(dr + p * kVec, zero);
    return;
  }
  float z = 0.f;
  xs.template for_each<true>([&](const P(&v)[1], int64_t) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) z += expf(to_f32(v[0].v[j]) - l);
  });
  z = row_reduce<kWarpRows>(z, SumOp{}, 0.f);
  const float scale = isfinite(l) ? g / z : g;
  xs.template for_each<false>([&](const P(&v)[1], int64_t p) {
    P o;
#pragma unroll
    for (int j = 0; j < kVec; ++j) o.v[j] = from_f32<T>(scale * expf(to_f32(v[0].v[j]) - l));
    store_pack(dr + p * kVec, o);
  });
}

// ---------------------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------------------

template <int N>
using Int = std::integral_constant<int, N>;

// The launch of one row kernel over NA arrays of (rows, V): warp rows up to kWarpRowMax, block rows
// beyond, their threads from the row length and their shared-memory copy of the rows when it fits.
struct RowLaunch {
  dim3 grid, block;
  size_t smem = 0;  // 0: not cached
};

template <typename T, int NA>
RowLaunch row_launch(int64_t rows, int64_t V, int kVec, int dev) {
  RowLaunch l;
  if (V <= kWarpRowMax) {
    constexpr int kRowsPerBlock = kWarpRowBlock / kWarpSize;
    l.grid = dim3(unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock));
    l.block = dim3(kWarpRowBlock);
    return l;
  }
  const int64_t packs = V / kVec;
  const int64_t threads = (packs / kPacksPerThread + kWarpSize - 1) / kWarpSize * kWarpSize;
  l.grid = dim3(unsigned(rows));
  l.block = dim3(unsigned(std::clamp<int64_t>(threads, kWarpSize, kBlockRowMax)));
  const size_t bytes = size_t(NA) * size_t(V) * sizeof(T);
  const size_t reserve = 1024;  // the reductions' static shared memory
  if (bytes + reserve <= cuda_device_props(dev).smem_per_block_optin) l.smem = bytes;
  return l;
}

// Calls f(kernel-choice tags Int<kVec>, std::bool_constant<kWarpRows>) for rows of V elements; 16-byte
// packs when every row starts 16-byte aligned.
template <typename T, typename F>
void dispatch_rows(int64_t V, bool aligned, F&& f) {
  constexpr int kVec = kPack16<T>;
  const bool vec = aligned && V % kVec == 0;
  const bool warp_rows = V <= kWarpRowMax;
  if (vec && warp_rows) {
    f(Int<kVec>{}, std::true_type{});
  } else if (vec) {
    f(Int<kVec>{}, std::false_type{});
  } else if (warp_rows) {
    f(Int<1>{}, std::true_type{});
  } else {
    f(Int<1>{}, std::false_type{});
  }
}

// Launches `kernel` with its arguments and, last, whether the rows are cached in shared memory.
template <typename Kernel, typename... Args>
void launch_rows(Kernel kernel, const char* name, const RowLaunch& l, int dev, Args... args) {
  if (l.smem > 48 * 1024)
    HYB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.smem)));
  kernel<<<l.grid, l.block, l.smem, current_stream(dev)>>>(args..., l.smem > 0);
  HYB_CUDA_LAUNCH_CHECK(name, l.grid, l.block, l.smem);
}

bool all_aligned(std::initializer_list<const void*> ps) {
  return std::all_of(ps.begin(), ps.end(), [](const void* p) { return is_aligned(p, 16); });
}

Tensor forward_rows(const Tensor& x0, RowOut out, const char* op) {
  Tensor x = x0.contiguous();
  const int64_t V = x.size(-1), rows = x.numel() / V;
  const Shape shape = out == RowOut::logsumexp ? Shape(x.shape().begin(), x.shape().end() - 1) : x.shape();
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  if (rows == 0) return y;
  const int dev = x.device().index;
  CudaDeviceGuard guard(dev);
  visit_cuda_float(op, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = out == RowOut::logsumexp ? nullptr : y.data<T>();
    T* lp = out == RowOut::logsumexp ? y.data<T>() : nullptr;
    dispatch_rows<T>(V, all_aligned({xp, yp}), [&](auto vec, auto warp_rows) {
      constexpr int kVec = decltype(vec)::value;
      const RowLaunch l = row_launch<T, 1>(rows, V, kVec, dev);
      launch_rows(softmax_forward_kernel<T, kVec, decltype(warp_rows)::value>, "softmax_forward_kernel", l, dev,
                  xp, yp, lp, rows, V, out);
    });
  });
  return y;
}

}  // namespace

Tensor softmax_forward_cuda(const Tensor& x, bool log) {
  return forward_rows(x, log ? RowOut::log_softmax : RowOut::softmax, log ? "log_softmax" : "softmax");
}

Tensor logsumexp_forward_cuda(const Tensor& x) { return forward_rows(x, RowOut::logsumexp, "logsumexp"); }

Tensor softmax_backward_cuda(const Tensor& y0, const Tensor& dy0, bool log) {
  Tensor y = y0.contiguous(), dy = dy0.contiguous();
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  const int64_t V = y.size(-1), rows = y.numel() / V;
  if (rows == 0) return dx;
  const int dev = y.device().index;
  CudaDeviceGuard guard(dev);
  visit_cuda_float(log ? "log_softmax" : "softmax", y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* yp = y.data<T>();
    const T* gp = dy.data<T>();
    T* dp = dx.data<T>();
    dispatch_rows<T>(V, all_aligned({yp, gp, dp}), [&](auto vec, auto warp_rows) {
      constexpr int kVec = decltype(vec)::value;
      const RowLaunch l = row_launch<T, 2>(rows, V, kVec, dev);
      launch_rows(softmax_backward_kernel<T, kVec, decltype(warp_rows)::value>, "softmax_backward_kernel", l, dev,
                  yp, gp, dp, rows, V, log);
    });
  });
  return dx;
}

Tensor logsumexp_backward_cuda(const LogsumexpSaved& s, const Tensor& dlse0) {
  Tensor x = s.x.contiguous(), lse = s.lse.contiguous(), dlse = dlse0.contiguous();
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t V = x.size(-1), rows = x.numel() / V;
  if (rows == 0) return dx;
  const int dev = x.device().index;
  CudaDeviceGuard guard(dev);
  visit_cuda_float("logsumexp", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* lp = lse.data<T>();
    const T* gp = dlse.data<T>();
    T* dp = dx.data<T>();
    dispatch_rows<T>(V, all_aligned({xp, dp}), [&](auto vec, auto warp_rows) {
      constexpr int kVec = decltype(vec)::value;
      const RowLaunch l = row_launch<T, 1>(rows, V, kVec, dev);
      launch_rows(logsumexp_backward_kernel<T, kVec, decltype(warp_rows)::value>, "logsumexp_backward_kernel", l,
                  dev, xp, lp, gp, dp, rows, V);
    });
  });
  return dx;
}

}  // namespace hyb
