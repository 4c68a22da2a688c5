// Building blocks of the chunked CUDA kernels of the linear-recurrence ops (simple_gla: mamba2.md 4;
// gated_delta_rule: gated_deltanet.md 4). Everything works on chunks of kScanChunk = 64 tokens of one
// (batch b, head h) and keeps fp32 scratch in the chunk layout (B, H, NC, rows, cols); the last
// chunk of a sequence is padded, and every read of a padded token returns 0, so padded rows of the
// scratch hold zeros (or finite values that never reach a valid output).
//
// The workhorse is a batched small GEMM over chunks, with strided operand views, so one launch does
// "the same product for every (b, h, chunk)" and transposes are views:
//   ChunkView q = token_view(q, B, T, Gq, K, H / Gq).scaled(gam);   // gam_r q_r, q of head h's group
//   chunk_gemm(out, q, states.slots(), nullptr, 1.0, dims);          // out = (gam .* Q) @ S_c
// Host loops over chunks (c0, nc = 1) run the sequential recurrences as a series of such launches.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hyb {

constexpr int kScanChunk = 64;

// One chunk's matrix of every (b, h, c): element (r, col) of batch (b, h, c) lives at
//   p + b sb + (h / hdiv) sh + c sc + r sr + col scol
// A token axis (rows when tok == 1, columns when tok == 2) indexes the chunk's tokens: entries of
// tokens c kScanChunk + i >= T read as 0, and a per-token factor scale[b ssb + h ssh + c ssc + i sst]
// (head h, not h / hdiv: decays and beta are per value head) multiplies the entry when set.
struct ChunkView {
  const void* p = nullptr;
  bool bf16 = false;  // else f32
  int64_t sb = 0, sh = 0, sc = 0, sr = 0, scol = 0;
  int rows = 0, cols = 0;
  int hdiv = 1;
  int tok = 0;  // 0 none, 1 rows, 2 columns
  const float* scale = nullptr;
  int64_t ssb = 0, ssh = 0, ssc = 0, sst = 0;

  ChunkView t() const;                                        // the transpose
  ChunkView scaled(const float* s, int64_t sb_, int64_t sh_, int64_t sc_, int64_t st_) const;
};

// The sizes every chunk kernel shares; the batch of a launch is (b, h, c) for c in [c0, c0 + nc).
struct ChunkDims {
  int64_t B, T, H;  // H: the heads of the batch (value heads)
  int64_t NC;       // chunks = ceil(T / kScanChunk)
  int device = 0;
  int64_t c0 = 0, nc = 0;  // nc = 0: all chunks
  ChunkDims at(int64_t c) const {  // the batch of chunk c only, for the host loops of recurrences
    ChunkDims r = *this;
    r.c0 = c, r.nc = 1;
    return r;
  }
};

// (B, T, heads, width) token-major tensor (f32 or bf16) as (kScanChunk x width) chunk matrices, rows =
// tokens; head h of the batch reads tensor head h / hdiv.
ChunkView token_view(const Tensor& x, int64_t hdiv);

// fp32 scratch of the chunk layout. slots = NC (per chunk) or NC + 1 (states: slot c is the state at
// the start of chunk c, slot NC the final one).
struct ChunkBuffer {
  Tensor t;  // (B, H, slots, rows, cols) f32
  int64_t slots = 0;
  int rows = 0, cols = 0;
  ChunkBuffer() = default;
  ChunkBuffer(int64_t B, int64_t H, int64_t slots, int rows, int cols, Device d);
  float* data() const { return t.data<float>(); }
  // Chunk c reads slot c + slot_offset; tok = 1 when the rows are the chunk's tokens.
  ChunkView view(int64_t slot_offset = 0, int tok = 0) const;
};

// Per-token fp32 vectors of the chunk layout (B, H, NC, kScanChunk), as written by chunk_gates_cuda.
struct ChunkVec {
  Tensor t;
  const float* p() const { return t.data<float>(); }
  int64_t sb() const { return t.size(1) * t.size(2) * kScanChunk; }
  int64_t sh() const { return t.size(2) * kScanChunk; }
};
ChunkView scale_by(const ChunkView& v, const ChunkVec& s);

// out = (z ? zs * z : 0) + alpha * X @ Y for every batch of dims; zs = exp(zlog[b, h, c]) when zlog is
// set (zlog (B, H, NC) f32), else 1. out and z are f32 views (z may be out itself). M = X.rows,
// N = Y.cols, reduction X.cols == Y.rows.
void chunk_gemm(const ChunkView& out, const ChunkView& x, const ChunkView& y, const ChunkView* z, const float* zlog,
                float alpha, const ChunkDims& dims);

struct ChunkGates {
  ChunkVec G;     // chunk-local cumsum of g; padded tokens repeat the last valid value
  ChunkVec gam;   // exp(G)
  ChunkVec kd;    // exp(G_last - G)
  ChunkVec beta;  // beta (0 on padded tokens), only with a beta input
  ChunkVec bg;    // beta gam, only with a beta input
  Tensor Glast;   // (B, H, NC) G of the chunk's last valid token: log of gam_n
};
// g and beta (B, T, H) f32 (beta may be undefined).
ChunkGates chunk_gates_cuda(const Tensor& g, const Tensor& beta, const ChunkDims& dims);

// On (kScanChunk x kScanChunk) chunk matrices of every batch: a[r, i] = src[r, i] f(r, i) (src = a
// itself when null) with f = 0 above the diagonal (and on it when strict), 0 on padded tokens, and
// otherwise (decay ? exp(min(G_r - G_i, 0)) : 1) * (rowscale ? rowscale[r] : 1).
void chunk_mask(const ChunkBuffer& a, const ChunkGates* decay, const ChunkVec* rowscale, bool strict,
                const ChunkDims& dims, const ChunkBuffer* src = nullptr);

// Per batch: out = (I + m)^-1 for strictly lower triangular chunk matrices m, by forward
// substitution in fp32 (gated_deltanet.md 4.2).
void chunk_unit_lower_inverse(const ChunkBuffer& out, const ChunkBuffer& m, const ChunkDims& dims);

// dst += s * src elementwise over (rows x cols) chunk matrices; s = exp(slog[b, h, c]) when slog is
// set, else 1. dst and src are f32 views (same shape).
void chunk_axpy_cuda(const ChunkView& dst, const ChunkView& src, const float* slog, const ChunkDims& dims);

// Chunk scratch (B, H, NC, kScanChunk, width) to a token tensor out (B, T, H / hpg, width) of out's dtype,
// summing the hpg consecutive heads of each out head in order, times rowscale[token] when set (only
// with hpg == 1) and times alpha.
void chunk_to_tokens(Tensor& out, const ChunkBuffer& buf, int64_t hpg, const ChunkVec* rowscale, float alpha,
                     const ChunkDims& dims);

// State slot copies: slot `slot` of buf (B, H, slots, K, V) from / to a (B, H, K, V) f32 tensor
// (undefined src: zeros).
void chunk_slot_load(const ChunkBuffer& buf, int64_t slot, const Tensor& src);
void chunk_slot_store(Tensor& dst, const ChunkBuffer& buf, int64_t slot);

}  // namespace hyb
