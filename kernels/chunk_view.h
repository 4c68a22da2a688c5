// Element access of the chunk toolkit (chunk_ops.h), shared by its CUDA kernels and their CPU twins
// so both read a view the same way. A view is one matrix per (batch b, head h, chunk c):
//   ChunkView q = ...;  float x = chunk_at(q, chunk_batch(z, H, 0, NC), r, col, T);
#pragma once
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/macros.h"

namespace hyb {

constexpr int kScanChunk = 64;  // tokens per chunk of the linear-recurrence kernels

// Element (r, col) of batch (b, h, c) lives at p + b sb + (h / hdiv) sh + c sc + r sr + col scol.
// A token axis (rows when tok == 1, columns when tok == 2) indexes the chunk's tokens: entries of
// tokens c kScanChunk + i >= T read as 0, and a per-token factor scale[b ssb + h ssh + c ssc + i sst]
// (head h, not h / hdiv: decays and beta are per value head) multiplies the entry when set.
struct ChunkView {
  enum Type : int { f32 = 0, bf16 = 1, f64 = 2 };  // f64: CPU twins only
  const void* p = nullptr;
  int type = f32;
  int64_t sb = 0, sh = 0, sc = 0, sr = 0, scol = 0;
  int rows = 0, cols = 0;
  int hdiv = 1;
  int tok = 0;  // 0 none, 1 rows, 2 columns
  const float* scale = nullptr;
  int64_t ssb = 0, ssh = 0, ssc = 0, sst = 0;

  ChunkView t() const {  // the transpose
    ChunkView v = *this;
    std::swap(v.rows, v.cols);
    std::swap(v.sr, v.scol);
    v.tok = tok == 1 ? 2 : (tok == 2 ? 1 : 0);
    return v;
  }
};

struct ChunkBatch {
  int64_t b, h, c;
};

// (b, h, c) of a flat batch index z in [0, B H nc), chunks c0 .. c0 + nc - 1.
HYB_HD ChunkBatch chunk_batch(int64_t z, int64_t H, int64_t c0, int64_t nc) {
  return {z / nc / H, (z / nc) % H, c0 + z % nc};
}

HYB_HD int64_t chunk_offset(const ChunkView& v, const ChunkBatch& q, int r, int col) {
  return q.b * v.sb + (q.h / v.hdiv) * v.sh + q.c * v.sc + int64_t(r) * v.sr + int64_t(col) * v.scol;
}

HYB_HD float chunk_bf16_to_float(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Element (r, col) of batch q: 0 outside the matrix or on a padded token, times the token scale.
HYB_HD float chunk_at(const ChunkView& v, const ChunkBatch& q, int r, int col, int64_t T) {
  if (r >= v.rows || col >= v.cols) return 0.f;
  const int tok = v.tok == 1 ? r : (v.tok == 2 ? col : -1);
  if (tok >= 0 && q.c * kScanChunk + tok >= T) return 0.f;
  const int64_t off = chunk_offset(v, q, r, col);
  float x;
  if (v.type == ChunkView::bf16)
    x = chunk_bf16_to_float(static_cast<const uint16_t*>(v.p)[off]);
  else if (v.type == ChunkView::f64)
    x = float(static_cast<const double*>(v.p)[off]);
  else
    x = static_cast<const float*>(v.p)[off];
  if (v.scale && tok >= 0) x *= v.scale[q.b * v.ssb + q.h * v.ssh + q.c * v.ssc + tok * v.sst];
  return x;
}

// The address of an element of an f32 view (outputs are always f32 scratch).
HYB_HD float* chunk_ptr(const ChunkView& v, const ChunkBatch& q, int r, int col) {
  return const_cast<float*>(static_cast<const float*>(v.p)) + chunk_offset(v, q, r, col);
}

// Valid tokens of chunk c.
HYB_HD int chunk_tokens(int64_t c, int64_t T) {
  const int64_t n = T - c * kScanChunk;
  return int(n < kScanChunk ? n : kScanChunk);
}

}  // namespace hyb
