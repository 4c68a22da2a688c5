// The chunk toolkit of the linear-recurrence ops (simple_gla: mamba2.md 4; gated_delta_rule:
// gated_deltanet.md 4): a handful of primitives over chunks of kScanChunk = 64 tokens of every
// (batch b, head h), on fp32 scratch in the chunk layout (B, H, NC, rows, cols). The last chunk is
// padded; every read of a padded token returns 0 (chunk_view.h), so padded rows hold zeros or
// finite values that never reach a valid output.
//
// Each primitive runs on the device of its tensors: CUDA kernels (chunk_ops_cuda.cu) or plain-loop
// CPU twins (chunk_ops.cpp) that read views through the same chunk_at. The ops' kernel sequences are
// written once on these primitives, so the CPU tests run the exact sequence the GPU runs.
//   ChunkView q = scale_by(token_view(q, H / Gq), gates.gam);        // gam_r q_r, q of head h's group
//   chunk_gemm(out.view(0, 1), q, states.view(0), nullptr, nullptr, 1.f, dims);   // (gam .* Q) @ S_c
// Host loops over chunks (dims.at(c)) run the recurrences that are not elementwise.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/chunk_view.h"

namespace hyb {

// The sizes every primitive shares; a call's batch is (b, h, c) for c in [c0, c0 + nc).
struct ChunkDims {
  int64_t B, T, H;  // H: the heads of the batch (value heads)
  int64_t NC;       // chunks = ceil(T / kScanChunk)
  Device device;
  int64_t c0 = 0, nc = 0;  // nc = 0: all chunks
  ChunkDims at(int64_t c) const {  // chunk c only
    ChunkDims r = *this;
    r.c0 = c, r.nc = 1;
    return r;
  }
  int64_t chunks() const { return nc ? nc : NC; }
  int64_t batches() const { return B * H * chunks(); }
};
ChunkDims chunk_dims(int64_t B, int64_t T, int64_t H, Device device);

// (B, T, heads, width) contiguous token tensor (f32, bf16; f64 on the CPU) as (kScanChunk x width)
// chunk matrices with rows = tokens; head h of the batch reads tensor head h / hdiv.
ChunkView token_view(const Tensor& x, int64_t hdiv);

// fp32 scratch (B, H, slots, rows, cols). slots = NC (per chunk) or NC + 1 (states: slot c is the
// state at the start of chunk c, slot NC the final one).
struct ChunkBuffer {
  Tensor t;
  int64_t slots = 0;
  int rows = 0, cols = 0;
  ChunkBuffer() = default;
  ChunkBuffer(const ChunkDims& d, int64_t slots, int64_t rows, int64_t cols);
  float* data() const { return t.data<float>(); }
  // Chunk c reads slot c + slot_offset; tok = 1 when the rows are the chunk's tokens.
  ChunkView view(int64_t slot_offset = 0, int tok = 0) const;
};

// Per-token fp32 vectors of the chunk layout (B, H, NC, kScanChunk).
struct ChunkVec {
  Tensor t;
  ChunkVec() = default;
  explicit ChunkVec(const ChunkDims& d);  // zeros
  float* p() const { return t.data<float>(); }
};
ChunkView scale_by(const ChunkView& v, const ChunkVec& s);  // v's token axis times s

struct ChunkGates {
  ChunkVec G;     // chunk-local cumsum of g; padded tokens repeat the last valid value
  ChunkVec gam;   // exp(G)
  ChunkVec kd;    // exp(G_last - G)
  ChunkVec beta;  // beta (0 on padded tokens), only with a beta input
  ChunkVec bg;    // beta gam, only with a beta input
  Tensor Glast;   // (B, H, NC) G of the chunk's last valid token: the log of gam_n
};
// g and beta (B, T, H) contiguous, f32 (f64 on the CPU); beta may be undefined.
ChunkGates chunk_gates(const Tensor& g, const Tensor& beta, const ChunkDims& d);

// out = (z ? zs * z : 0) + alpha * x @ y for every batch; zs = exp(zlog[b, h, c]) when zlog is set
// (zlog (B, H, NC) f32), else 1. out and z are f32 views (z may be out itself, element for element);
// out must not overlap x or y. M = x.rows, N = y.cols, reduction x.cols == y.rows.
void chunk_gemm(const ChunkView& out, const ChunkView& x, const ChunkView& y, const ChunkView* z, const Tensor& zlog,
                float alpha, const ChunkDims& d);

// On (kScanChunk x kScanChunk) matrices: a[r, i] = src[r, i] f(r, i) (src = a when null) with f = 0
// above the diagonal (and on it when strict) and on padded tokens, otherwise
// (decay ? exp(min(G_r - G_i, 0)) : 1) * (rowscale ? rowscale[r] : 1).
void chunk_mask(const ChunkBuffer& a, const ChunkGates* decay, const ChunkVec* rowscale, bool strict,
                const ChunkDims& d, const ChunkBuffer* src = nullptr);

// out = (I + m)^-1 of strictly lower triangular chunk matrices m, by fp32 forward substitution.
void chunk_unit_lower_inverse(const ChunkBuffer& out, const ChunkBuffer& m, const ChunkDims& d);

// dst += s * src elementwise over equal-shaped views; s = exp(slog[b, h, c]) when slog is defined.
void chunk_axpy(const ChunkView& dst, const ChunkView& src, const Tensor& slog, const ChunkDims& d);

// States (B, H, NC + 1, K, V), sequential over chunks in fp32:
//   forward: slot c + 1 += exp(Glast_c) slot c,  c = 0 .. NC-1   (local states -> chunk-start states)
//   reverse: slot c += exp(Glast_c) slot c + 1,  c = NC-1 .. 0   (local gradients -> D, slot 0 = dS0)
void chunk_state_scan(const ChunkBuffer& states, const Tensor& Glast, bool reverse, const ChunkDims& d);

// The sequential part of the delta rule (gated_deltanet.md 4.3 F3, 4.4 stage 1), per (b, h) over the
// chunks in order (reverse: NC-1 .. 0), with S the running (K x V) state read from slot 0 (reverse:
// slot NC) of `states`:
//   T_c = T_c + sign_a * A_c @ S                      T: (kScanChunk x V) chunk buffer, in place
//   S   = exp(Glast_c) S + sign_b * Bm_c @ T_c         reverse: + states slot c (read before written)
//   states slot c + 1 (reverse: slot c) = S
// A: (kScanChunk x K) view, Bm: (K x kScanChunk) view. K <= 256 on CUDA (the state tile stays in
// shared memory).
void chunk_delta_scan(const ChunkBuffer& states, const ChunkBuffer& T, const ChunkView& A, float sign_a,
                      const ChunkView& Bm, float sign_b, const Tensor& Glast, bool reverse, const ChunkDims& d);

// vec[b, h, c, r] += alpha * sum_col x(r, col) y(r, col) for r < kScanChunk (x, y: kScanChunk rows).
void chunk_rowdot(const ChunkVec& vec, const ChunkView& x, const ChunkView& y, float alpha, const ChunkDims& d);

// vec[b, h, c, last valid token] += sum_{r, col} a(r, col) b(r, col).
void chunk_inner_last(const ChunkVec& vec, const ChunkView& a, const ChunkView& b, const ChunkDims& d);

// out (B, T, H) f32 from vec: the value, or its reverse cumsum within the chunk.
void chunk_vec_to_tokens(Tensor& out, const ChunkVec& vec, bool reverse_cumsum, const ChunkDims& d);

// Chunk scratch (B, H, NC, kScanChunk, width) to out (B, T, H / hpg, width) in out's dtype: the sum
// over the hpg consecutive heads of each out head in head order, times rowscale[token] (hpg == 1
// only) and alpha.
void chunk_to_tokens(Tensor& out, const ChunkBuffer& buf, int64_t hpg, const ChunkVec* rowscale, float alpha,
                     const ChunkDims& d);

// Slot copies between states (B, H, slots, K, V) and a contiguous (B, H, K, V) tensor (f32; f64 on
// the CPU); an undefined src loads zeros.
void chunk_slot_load(const ChunkBuffer& buf, int64_t slot, const Tensor& src);
void chunk_slot_store(Tensor& dst, const ChunkBuffer& buf, int64_t slot);

// The CUDA implementations (chunk_ops_cuda.cu), called by the primitives above on cuda tensors.
namespace chunk_cuda {
void gates(const ChunkGates& out, const Tensor& g, const Tensor& beta, const ChunkDims& d);
void gemm(const ChunkView& out, const ChunkView& x, const ChunkView& y, const ChunkView* z, const float* zlog,
          float alpha, const ChunkDims& d);
void mask(float* a, const float* src, const float* G, const float* rowscale, bool strict, const ChunkDims& d);
void unit_lower_inverse(float* out, const float* m, const ChunkDims& d);
void axpy(const ChunkView& dst, const ChunkView& src, const float* slog, const ChunkDims& d);
void state_scan(float* states, const float* Glast, int64_t KV, bool reverse, const ChunkDims& d);
void delta_scan(float* states, float* T, int64_t K, int64_t V, const ChunkView& A, float sign_a, const ChunkView& Bm,
                float sign_b, const float* Glast, bool reverse, const ChunkDims& d);
void rowdot(float* vec, const ChunkView& x, const ChunkView& y, float alpha, const ChunkDims& d);
void inner_last(float* vec, const ChunkView& a, const ChunkView& b, const ChunkDims& d);
void vec_to_tokens(float* out, const float* vec, bool reverse_cumsum, const ChunkDims& d);
void to_tokens(Tensor& out, const float* buf, int64_t width, int64_t hpg, const float* rowscale, float alpha,
               const ChunkDims& d);
void slot_copy(float* buf, float* t, int64_t BH, int64_t slots, int64_t slot, int64_t KV, bool to_buf, int device);
}  // namespace chunk_cuda

}  // namespace hyb
