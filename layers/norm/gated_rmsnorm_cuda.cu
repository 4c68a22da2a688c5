// CUDA gated RMSNorm in both orders (gated_rmsnorm_op.h has the equations; mamba2.md 3.6 and
// gated_deltanet.md 3.7 the backward). One warp per row of Gs channels, as rmsnorm_cuda.cu: rows
// are a head (GDN, V <= 512) or d_ssm / G channels (Mamba2, a few thousand), so 32 lanes striding
// the row keep loads coalesced and the reductions are shuffles. Loads and stores move V elements
// (16-byte packs where Gs and the pointers allow). Statistics in fp32; rstd is saved in fp32.
// The gain gradient (wrows, Gs) is reduced without atomics: the grid has a multiple of wrows warps,
// so every row a warp takes uses the same gain row and the warp sums into its own shared (Gs,) row
// (a lane only touches its own columns: no barriers); the block adds its warps' rows in warp order
// into one (wrows, Gs) partial, and column_sum_kernel adds the partials in a fixed order. Rows wider
// than a warp's pack row (Mamba2's) take row-group blocks instead (the rows kernels below), whose
// slots each keep one gain row and write their own partial row. No float atomics: for a given shape
// and device the results are the same bits on every run.
#include <algorithm>
#include <numeric>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "kernels/step_queue.cuh"
#include "kernels/vector_io.cuh"
#include "layers/softmax_attention/flash_attention_device.cuh"  // cp.async
#include "layers/norm/gated_rmsnorm_op.h"

namespace hyb {
namespace {

constexpr int kRowsPerBlock = 8;     // forward: warps per block, one row each
// Row-group kernels: rows of up to kMaxRowThreads packs, blocks of about kRowGroupThreads threads
// (several slots when a row is narrower), at most kRowGroupRegisters registers a thread: three
// 256-thread blocks an SM. Rows a slot keeps in flight: forward (x, z) in registers, at three blocks an
// SM 48 KiB of loads in flight; more rows, or 64 registers for a fourth block, make ptxas spill (the
// gate's sigmoids are live across the row statistics). Backward (x, z, dy): two steps ahead in shared
// memory (gated_rmsnorm_backward_rows_kernel).
constexpr int kMaxRowThreads = 512;
constexpr int kRowGroupThreads = 256;
constexpr int kRowGroupRegisters = 80;
constexpr int kFwdRowsPerSlot = 2;
constexpr int kBwdRowsPerSlot = 1;
// Backward: the step computed and two in shared memory in flight. Measured at 32768 x 2048 bf16 on the
// H100: 83% of copy at 80 registers (3 blocks an SM), 75% at 64 (4 blocks, but ptxas spills), 75% with
// the rows in registers before.
constexpr int kBwdStages = 3;

// Row-group blocks to fill the device once at `kernel`'s occupancy (fewer for few rows), rounded up so
// the slots Q = grid * block.y are a multiple of wrows: each slot then keeps one gain row.
template <typename Kernel>
int row_group_grid(Kernel kernel, dim3 block, int rows_per_slot, int64_t rows, int64_t wrows, size_t smem, int dev) {
  const int threads = int(block.x * block.y);
  const int64_t groups = (rows + int64_t(block.y) * rows_per_slot - 1) / (int64_t(block.y) * rows_per_slot);
  const int64_t fill = grid_blocks_for(kernel, groups * threads, threads, smem, dev);
  const int64_t unit = wrows / std::gcd(wrows, int64_t(block.y));
  return int((fill + unit - 1) / unit * unit);
}

// __fdividef: the IEEE division's slow path is a good share of the backward's instructions (two
// sigmoids per element), and the fast one is within 2 ulp.
__device__ __forceinline__ float sigmoidf_(float z) { return __fdividef(1.f, 1.f + __expf(-z)); }

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

// x, z, y (rows, Gs); w (wrows, Gs), row r uses w row r % wrows; rstd (rows,) fp32.
template <typename T, int V>
__global__ void gated_rmsnorm_forward_kernel(const T* __restrict__ x, const T* __restrict__ z, const T* __restrict__ w,
                                             T* __restrict__ y, float* __restrict__ rstd, int64_t rows, int Gs,
                                             int64_t wrows, float eps, bool gate_first) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const T *xr = x + row * Gs, *zr = z + row * Gs, *wr = w + (row % wrows) * Gs;
  T* yr = y + row * Gs;
  float ss = 0.f;
  for (int c = lane * V; c < Gs; c += kWarpSize * V) {
    float xv[V], zv[V];
    load_f32(xr + c, xv);
    if (gate_first) load_f32(zr + c, zv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float a = gate_first ? xv[e] * zv[e] * sigmoidf_(zv[e]) : xv[e];
      ss += a * a;
    }
  }
  ss = warp_reduce_sum(ss);
  const float rs = rsqrtf(ss / float(Gs) + eps);
  if (lane == 0) rstd[row] = rs;
  for (int c = lane * V; c < Gs; c += kWarpSize * V) {
    float xv[V], zv[V], wv[V], out[V];
    load_f32(xr + c, xv);
    load_f32(zr + c, zv);
    load_f32(wr + c, wv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float silu_z = zv[e] * sigmoidf_(zv[e]);
      out[e] = gate_first ? xv[e] * silu_z * rs * wv[e] : xv[e] * rs * wv[e] * silu_z;
    }
    store_f32(yr + c, out);
  }
}

// Rows of kWarpSize * V < Gs <= kMaxRowThreads * V elements (Mamba2's d_ssm / G): row-group blocks.
// A block row (threadIdx.y, a slot) of ceil(Gs / V) threads (whole warps) holds one pack of each
// stream per thread; slot q = blockIdx.x * blockDim.y + threadIdx.y of Q = gridDim.x * blockDim.y
// takes rows q, q + Q, q + 2Q, ..., kRows of them per step with all their loads issued before any
// math, so a thread keeps kRows packs of every input in flight and the rows' statistics cost one
// barrier (block_row_sum). Q is a multiple of wrows, so all of a slot's rows use gain row q % wrows,
// held in registers. Every slot of a block runs the same number of steps (the barrier needs them
// all); rows past the end load and store nothing.
template <typename T, int V, int kRows, bool gate_first>
__global__ void __maxnreg__(kRowGroupRegisters)
    gated_rmsnorm_forward_rows_kernel(const T* __restrict__ x, const T* __restrict__ z, const T* __restrict__ w,
                                      T* __restrict__ y, float* __restrict__ rstd, int64_t rows, int Gs, int64_t wrows,
                                      float eps) {
  using P = Pack<T, V>;
  __shared__ float s_sum[2][kMaxBlockWarps * kRows];
  const int c = threadIdx.x * V;
  const bool active = c < Gs;
  const int64_t Q = int64_t(gridDim.x) * blockDim.y, q = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t q0 = int64_t(blockIdx.x) * blockDim.y;  // the block's first slot: its rows bound the steps
  P wp{};
  if (active) wp = load_pack<P>(w + (q % wrows) * Gs + c);
  int step = 0;
#pragma unroll 1
  for (int64_t k = 0; q0 + k * Q < rows; k += kRows, ++step) {
    P xp[kRows], zp[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = q + (k + r) * Q;
      xp[r] = zp[r] = P{};
      if (active && row < rows) {
        xp[r] = load_pack<P>(x + row * Gs + c);
        zp[r] = load_pack<P>(z + row * Gs + c);
      }
    }
    float ss[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float xv[V], zv[V];
      unpack_f32(xp[r], xv);
      unpack_f32(zp[r], zv);
      ss[r] = 0.f;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float a = gate_first ? xv[e] * zv[e] * sigmoidf_(zv[e]) : xv[e];
        ss[r] += a * a;
      }
    }
    block_row_sum(ss, s_sum[step % 2]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = q + (k + r) * Q;
      if (row >= rows) continue;
      const float rs = rsqrtf(ss[r] / float(Gs) + eps);
      if (threadIdx.x == 0) rstd[row] = rs;
      if (!active) continue;
      float xv[V], zv[V], wv[V], out[V];
      unpack_f32(xp[r], xv);
      unpack_f32(zp[r], zv);
      unpack_f32(wp, wv);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float silu_z = zv[e] * sigmoidf_(zv[e]);
        out[e] = gate_first ? xv[e] * silu_z * rs * wv[e] : xv[e] * rs * wv[e] * silu_z;
      }
      store_f32(y + row * Gs + c, out);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

// One element's backward terms: the gate's sigmoid sg, the normalised value nh and dnh = dL/dnh.
struct GatedTerms {
  float sg, nh, dnh;
};

__device__ __forceinline__ GatedTerms gated_terms(bool gate_first, float x, float z, float g, float w, float rs) {
  const float sg = sigmoidf_(z);
  return {sg, (gate_first ? x * z * sg : x) * rs, gate_first ? g * w : g * w * z * sg};
}

// The element's dx (ox) and dz (oz) from its terms and dn = r (dnh - nh m); returns its dw term.
__device__ __forceinline__ float gated_grads(bool gate_first, float x, float z, float g, float w, float rs,
                                             const GatedTerms& t, float dn, float& ox, float& oz) {
  const float dsilu = t.sg * (1.f + z * (1.f - t.sg));
  if (gate_first) {
    ox = dn * z * t.sg;
    oz = dn * x * dsilu;
  } else {
    ox = dn;
    oz = g * t.nh * w * dsilu;
  }
  return gate_first ? g * x * z * t.sg * rs : g * z * t.sg * x * rs;
}

// Per row, with nh the normalised row (a r or x r) and dnh = dL/dnh, m = mean(dnh nh):
//   dn = r (dnh - nh m) is dL/da (gate first) or dL/dx (norm first);
//   gate first: dx = dn silu(z), dz = dn x silu'(z), dw += dy nh
//   norm first: dx = dn, dz = dy nh w silu'(z), dw += dy silu(z) nh
// Warps walk rows grid-stride; gridDim.x * warps is a multiple of wrows (see the file comment).
// dw_partial (gridDim.x, wrows * Gs) fp32.
template <typename T, int V>
__global__ void gated_rmsnorm_backward_kernel(const T* __restrict__ x, const T* __restrict__ z,
                                              const T* __restrict__ w, const T* __restrict__ dy,
                                              const float* __restrict__ rstd, T* __restrict__ dx, T* __restrict__ dz,
                                              float* __restrict__ dw_partial, int64_t rows, int Gs, int64_t wrows,
                                              bool gate_first) {
  extern __shared__ float s_dw[];  // (warps, Gs)
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  const int64_t first_row = int64_t(blockIdx.x) * warps + warp;
  float* my_dw = s_dw + int64_t(warp) * Gs;
  if (dw_partial)
    for (int c = lane * V; c < Gs; c += kWarpSize * V)
#pragma unroll
      for (int e = 0; e < V; ++e) my_dw[c + e] = 0.f;
  const T* wr = w + (first_row % wrows) * Gs;  // the same gain row for every row of this warp
  for (int64_t row = first_row; row < rows; row += int64_t(gridDim.x) * warps) {
    const T *xr = x + row * Gs, *zr = z + row * Gs, *gr = dy + row * Gs;
    const float rs = rstd[row];
    float m = 0.f;
    if (dx || dz) {
      for (int c = lane * V; c < Gs; c += kWarpSize * V) {
        float xv[V], zv[V], go[V], wv[V];
        load_f32(xr + c, xv);
        load_f32(zr + c, zv);
        load_f32(gr + c, go);
        load_f32(wr + c, wv);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const GatedTerms t = gated_terms(gate_first, xv[e], zv[e], go[e], wv[e], rs);
          m += t.dnh * t.nh;
        }
      }
      m = warp_reduce_sum(m) / float(Gs);
    }
    for (int c = lane * V; c < Gs; c += kWarpSize * V) {
      float xv[V], zv[V], go[V], wv[V], ox[V], oz[V];
      load_f32(xr + c, xv);
      load_f32(zr + c, zv);
      load_f32(gr + c, go);
      load_f32(wr + c, wv);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const GatedTerms t = gated_terms(gate_first, xv[e], zv[e], go[e], wv[e], rs);
        const float dwe =
            gated_grads(gate_first, xv[e], zv[e], go[e], wv[e], rs, t, rs * (t.dnh - t.nh * m), ox[e], oz[e]);
        if (dw_partial) my_dw[c + e] += dwe;
      }
      if (dx) store_f32(dx + row * Gs + c, ox);
      if (dz) store_f32(dz + row * Gs + c, oz);
    }
  }
  if (!dw_partial) return;
  __syncthreads();
  const int64_t wn = wrows * Gs;
  for (int64_t i = threadIdx.x; i < wn; i += blockDim.x) {
    const int64_t r = i / Gs, c = i - r * Gs;
    float s = 0.f;
    for (int k = 0; k < warps; ++k)
      if ((int64_t(blockIdx.x) * warps + k) % wrows == r) s += s_dw[int64_t(k) * Gs + c];
    dw_partial[int64_t(blockIdx.x) * wn + i] = s;
  }
}

// The backward in the forward's row-group layout (slot q takes rows q, q + Q, ..., kRows a step, with
// its gain row q % wrows in registers), its loads kStages - 1 steps ahead: each thread copies its
// packs of x, z and dy of the steps ahead into shared memory (cp.async) and reads back only what it
// copied, so the copies' own completion orders them and no barrier is needed (as the rmsnorm
// backward). The rows' m by one block_row_sum, and the thread's columns' dw in registers over all its
// slot's rows. Slot q's dw goes to row q / wrows, columns (q % wrows) * Gs.. of dw_partial, a
// (Q / wrows, wrows * Gs) matrix. Shared memory: rows_backward_smem.
template <typename T, int V, int kRows, int kStages, bool gate_first>
__global__ void __maxnreg__(kRowGroupRegisters)
    gated_rmsnorm_backward_rows_kernel(const T* __restrict__ x, const T* __restrict__ z, const T* __restrict__ w,
                                       const T* __restrict__ dy, const float* __restrict__ rstd, T* __restrict__ dx,
                                       T* __restrict__ dz, float* __restrict__ dw_partial, int64_t rows, int Gs,
                                       int64_t wrows) {
  using P = Pack<T, V>;
  static_assert(sizeof(P) == 16, "the copies are 16-byte cp.async");
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float s_sum[2][kMaxBlockWarps * kRows];
  T* s_rows = reinterpret_cast<T*>(smem);  // [stage][slot][row][x, z, dy][Gs]
  const int slots = int(blockDim.y);
  const int c = threadIdx.x * V;
  const bool active = c < Gs;
  const int64_t Q = int64_t(gridDim.x) * blockDim.y, q = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t q0 = int64_t(blockIdx.x) * blockDim.y;
  const int64_t wrow = q % wrows;
  auto staged = [&](int stage, int r, int which) {
    return s_rows + ((int64_t(stage * slots + int(threadIdx.y)) * kRows + r) * 3 + which) * Gs + c;
  };
  float rs_ahead[kStages - 1][kRows];  // rstd of the steps in flight, oldest first
  // Rows past the end are zero-filled (and their rstd 0): they add nothing to dw.
  auto issue = [&](int64_t k, int stage) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = q + (k + r) * Q;
      const bool ok = row < rows;
      rs_ahead[kStages - 2][r] = ok ? rstd[row] : 0.f;
      if (active) {
        flash::cp_async16(flash::smem_u32(staged(stage, r, 0)), ok ? x + row * Gs + c : x, ok);
        flash::cp_async16(flash::smem_u32(staged(stage, r, 1)), ok ? z + row * Gs + c : z, ok);
        flash::cp_async16(flash::smem_u32(staged(stage, r, 2)), ok ? dy + row * Gs + c : dy, ok);
      }
    }
    flash::cp_async_commit();
  };
  P wp{};
  if (active) wp = load_pack<P>(w + wrow * Gs + c);
  float dw[V];
#pragma unroll
  for (int e = 0; e < V; ++e) dw[e] = 0.f;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    shift_steps(rs_ahead);
    issue(int64_t(s) * kRows, s);
  }
  // Row r's x, z, dy (from shared memory) and gain packs in fp32.
  auto unpack_row = [&](int stage, int r, float(&xv)[V], float(&zv)[V], float(&go)[V], float(&wv)[V]) {
    unpack_f32(load_pack<P>(staged(stage, r, 0)), xv);
    unpack_f32(load_pack<P>(staged(stage, r, 1)), zv);
    unpack_f32(load_pack<P>(staged(stage, r, 2)), go);
    unpack_f32(wp, wv);
  };
  int step = 0;
#pragma unroll 1
  for (int64_t k = 0; q0 + k * Q < rows; k += kRows, ++step) {
    const int stage = step % kStages;
    float rs[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) rs[r] = rs_ahead[0][r];
    shift_steps(rs_ahead);
    issue(k + int64_t(kStages - 1) * kRows, (step + kStages - 1) % kStages);
    flash::cp_async_wait<kStages - 1>();
    // m = mean(dnh * nh) of each row, when dx or dz is wanted (a uniform branch: the barrier is safe).
    float m[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) m[r] = 0.f;
    if (dx || dz) {
      if (active)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float xv[V], zv[V], go[V], wv[V];
          unpack_row(stage, r, xv, zv, go, wv);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const GatedTerms t = gated_terms(gate_first, xv[e], zv[e], go[e], wv[e], rs[r]);
            m[r] += t.dnh * t.nh;
          }
        }
      block_row_sum(m, s_sum[step % 2]);
    }
    if (!active) continue;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = q + (k + r) * Q;
      const float mr = m[r] / float(Gs);
      float xv[V], zv[V], go[V], wv[V], ox[V], oz[V];
      unpack_row(stage, r, xv, zv, go, wv);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const GatedTerms t = gated_terms(gate_first, xv[e], zv[e], go[e], wv[e], rs[r]);
        dw[e] += gated_grads(gate_first, xv[e], zv[e], go[e], wv[e], rs[r], t, rs[r] * (t.dnh - t.nh * mr), ox[e],
                             oz[e]);
      }
      if (row >= rows) continue;
      if (dx) store_f32(dx + row * Gs + c, ox);
      if (dz) store_f32(dz + row * Gs + c, oz);
    }
  }
  flash::cp_async_wait<0>();  // the last, empty groups
  if (dw_partial && active) store_f32(dw_partial + (q / wrows) * (wrows * Gs) + wrow * Gs + c, dw);
}

// Dynamic shared memory of gated_rmsnorm_backward_rows_kernel: `stages` steps of the block's rows
// of x, z and dy.
template <typename T>
size_t rows_backward_smem(dim3 block, int rows_per_slot, int stages, int Gs) {
  return size_t(stages) * block.y * rows_per_slot * 3 * Gs * sizeof(T);
}

}  // namespace

Tensor gated_rmsnorm_forward_cuda(const Tensor& x0, const Tensor& z0, const Tensor& w0, double eps,
                                  GatedNormOrder order, Tensor* rstd_out) {
  const Tensor x = x0.contiguous(), z = z0.contiguous(), w = w0.contiguous();
  const int Gs = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(Gs, 1), wrows = w.numel() / std::max(Gs, 1);
  const int dev = x.device().index;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, DType::f32, x.device());
  if (rows > 0 && Gs > 0) {
    const int blocks = int((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    visit_cuda_float("gated_rmsnorm_forward_cuda", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      auto launch = [&](auto kernel) {
        kernel<<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(
            x.data<T>(), z.data<T>(), w.data<T>(), y.data<T>(), rstd.data<float>(), rows, Gs, wrows, float(eps),
            order == GatedNormOrder::gate_then_norm);
        HYB_CUDA_LAUNCH_CHECK("gated_rmsnorm_forward_kernel", blocks, kRowsPerBlock * kWarpSize, 0);
      };
      constexpr int P = kPack16<T>;
      const bool packed = pack_width<T>(Gs, {x.data<T>(), z.data<T>(), w.data<T>(), y.data<T>()}) > 1;
      if (packed && Gs > kWarpSize * P && Gs <= kMaxRowThreads * P) {
        auto kernel = order == GatedNormOrder::gate_then_norm
                          ? gated_rmsnorm_forward_rows_kernel<T, P, kFwdRowsPerSlot, true>
                          : gated_rmsnorm_forward_rows_kernel<T, P, kFwdRowsPerSlot, false>;
        const dim3 block = row_group_block(Gs, P, kRowGroupThreads);
        const int grid = row_group_grid(kernel, block, kFwdRowsPerSlot, rows, wrows, 0, dev);
        kernel<<<grid, block, 0, current_stream(dev)>>>(x.data<T>(), z.data<T>(), w.data<T>(), y.data<T>(),
                                                        rstd.data<float>(), rows, Gs, wrows, float(eps));
        HYB_CUDA_LAUNCH_CHECK("gated_rmsnorm_forward_rows_kernel", grid, block, 0);
      } else if (packed) {
        launch(gated_rmsnorm_forward_kernel<T, P>);
      } else {
        launch(gated_rmsnorm_forward_kernel<T, 1>);
      }
    });
  }
  if (rstd_out) *rstd_out = rstd;
  return y;
}

GatedRmsNormGrads gated_rmsnorm_backward_cuda(const GatedRmsNormSaved& s, const Tensor& dy0, GradMask needed) {
  const Tensor x = s.x.contiguous(), z = s.z.contiguous(), w = s.w.contiguous(), dy = dy0.contiguous();
  const Tensor rstd = s.rstd.contiguous();
  HYB_CHECK(rstd.dtype() == DType::f32 && rstd.is_cuda(), "gated_rmsnorm_backward_cuda: the saved rstd is ",
            rstd.str(), "; it must come from the CUDA forward (f32 on the device)");
  const int Gs = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(Gs, 1), wn = w.numel(), wrows = wn / std::max(Gs, 1);
  const int dev = x.device().index;
  GatedRmsNormGrads g;
  if (needed[0]) g.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (needed[1]) g.dz = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows == 0 || Gs == 0) {
    if (needed[2]) g.dw = Tensor::zeros(w.shape(), w.dtype(), w.device());
    return g;
  }
  // One shared fp32 (Gs,) row per warp: as many warps (up to 8) as 48 KiB holds.
  constexpr size_t kSmemCap = 48 * 1024;
  const size_t row_bytes = size_t(Gs) * sizeof(float);
  HYB_CHECK(!needed[2] || row_bytes <= kSmemCap, "gated_rmsnorm_backward_cuda: groups of ", Gs,
            " channels exceed the 12288-wide shared dw row");
  const int warps = needed[2] ? int(std::clamp<size_t>(kSmemCap / row_bytes, 1, 8)) : 8;
  const int threads = warps * kWarpSize;
  const size_t smem = needed[2] ? size_t(warps) * row_bytes : 0;
  const bool gate_first = s.order == GatedNormOrder::gate_then_norm;
  visit_cuda_float("gated_rmsnorm_backward_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dx = needed[0] ? g.dx.data<T>() : nullptr;
    T* dz = needed[1] ? g.dz.data<T>() : nullptr;
    const bool packed = pack_width<T>(Gs, {x.data<T>(), z.data<T>(), w.data<T>(), dy.data<T>(), dx, dz}) > 1;
    constexpr int P = kPack16<T>;
    // Enough blocks to fill every SM at the kernel's occupancy, rounded up to a multiple of `unit`.
    auto grid_for = [&](auto kernel, int threads, size_t smem, int64_t want, int64_t unit) {
      const int64_t fill = grid_blocks_for(kernel, want * threads, threads, smem, dev);
      return int((fill + unit - 1) / unit * unit);
    };
    auto reduce_dw = [&](const Tensor& partial, int partial_rows) {
      g.dw = Tensor::empty(w.shape(), w.dtype(), w.device());
      column_sum_kernel<T><<<column_sum_blocks(wn), column_sum_threads(partial_rows), 0, current_stream(dev)>>>(
          partial.data<float>(), g.dw.data<T>(), partial_rows, wn, 1.f);
      HYB_CUDA_LAUNCH_CHECK("column_sum_kernel (gated_rmsnorm dw)", column_sum_blocks(wn), column_sum_threads(partial_rows), 0);
    };
    // The row-group kernel's stages need up to 72 KiB (4096 channels in bf16); a GPU with less shared
    // memory a block takes the warp kernel instead. Sized only for the widths it may take: a group of
    // fewer than P channels has no row-group block.
    dim3 block;
    size_t rows_smem = 0;
    auto rows_fit = [&] {
      block = row_group_block(Gs, P, kRowGroupThreads);
      rows_smem = rows_backward_smem<T>(block, kBwdRowsPerSlot, kBwdStages, Gs);
      return rows_smem <= cuda_device_props(dev).smem_per_block_optin;
    };
    if (packed && Gs > kWarpSize * P && Gs <= kMaxRowThreads * P && rows_fit()) {
      auto kernel = gate_first ? gated_rmsnorm_backward_rows_kernel<T, P, kBwdRowsPerSlot, kBwdStages, true>
                               : gated_rmsnorm_backward_rows_kernel<T, P, kBwdRowsPerSlot, kBwdStages, false>;
      HYB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(rows_smem)));
      const int blocks = row_group_grid(kernel, block, kBwdRowsPerSlot, rows, wrows, rows_smem, dev);
      const int partial_rows = int(int64_t(blocks) * block.y / wrows);
      Tensor partial;
      if (needed[2]) partial = Tensor::empty({partial_rows, wn}, DType::f32, x.device());
      kernel<<<blocks, block, rows_smem, current_stream(dev)>>>(
          x.data<T>(), z.data<T>(), w.data<T>(), dy.data<T>(), rstd.data<float>(), dx, dz,
          needed[2] ? partial.data<float>() : nullptr, rows, Gs, wrows);
      HYB_CUDA_LAUNCH_CHECK("gated_rmsnorm_backward_rows_kernel", blocks, block, rows_smem);
      if (needed[2]) reduce_dw(partial, partial_rows);
      return;
    }
    auto launch = [&](auto kernel) {
      // The grid's warps a multiple of wrows: each warp then keeps one gain row.
      const int blocks = grid_for(kernel, threads, smem, (rows + warps - 1) / warps,
                                  wrows / std::gcd(wrows, int64_t(warps)));
      Tensor partial;
      if (needed[2]) partial = Tensor::empty({blocks, wn}, DType::f32, x.device());
      kernel<<<blocks, threads, smem, current_stream(dev)>>>(x.data<T>(), z.data<T>(), w.data<T>(), dy.data<T>(),
                                                             rstd.data<float>(), dx, dz,
                                                             needed[2] ? partial.data<float>() : nullptr, rows, Gs, wrows,
                                                             gate_first);
      HYB_CUDA_LAUNCH_CHECK("gated_rmsnorm_backward_kernel", blocks, threads, smem);
      if (needed[2]) reduce_dw(partial, blocks);
    };
    if (packed)
      launch(gated_rmsnorm_backward_kernel<T, P>);
    else
      launch(gated_rmsnorm_backward_kernel<T, 1>);
  });
  return g;
}

}  // namespace hyb
