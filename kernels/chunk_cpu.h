// Small dense matrices in double and the per-chunk decay quantities, for the chunked CPU references
// of the linear-recurrence ops (simple_gla: mamba2.md 4.1; gated_delta_rule: gated_deltanet.md 4.1).
// Plain loops: these references are read next to the CUDA kernels, not timed.
//   ChunkDecay d(g_chunk);                          // G, gam, kd, L of one chunk of n tokens
//   ChunkMat o = chunk_matmul(q, false, s, false);  // (n, K) x (K, V)
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace hyb {

struct ChunkMat {
  int64_t rows = 0, cols = 0;
  std::vector<double> a;
  ChunkMat() = default;
  ChunkMat(int64_t r, int64_t c) : rows(r), cols(c), a(size_t(r * c), 0.0) {}
  double& operator()(int64_t i, int64_t j) { return a[size_t(i * cols + j)]; }
  double operator()(int64_t i, int64_t j) const { return a[size_t(i * cols + j)]; }
};

// op(x) op(y), op = transpose when the flag is set.
inline ChunkMat chunk_matmul(const ChunkMat& x, bool tx, const ChunkMat& y, bool ty) {
  const int64_t m = tx ? x.cols : x.rows, k = tx ? x.rows : x.cols, n = ty ? y.rows : y.cols;
  ChunkMat out(m, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double xv = tx ? x(p, i) : x(i, p);
      if (xv == 0.0) continue;
      for (int64_t j = 0; j < n; ++j) out(i, j) += xv * (ty ? y(j, p) : y(p, j));
    }
  return out;
}

// x + alpha y, elementwise (same shapes).
inline void chunk_axpy(ChunkMat& x, double alpha, const ChunkMat& y) {
  for (size_t i = 0; i < x.a.size(); ++i) x.a[i] += alpha * y.a[i];
}

inline double chunk_inner(const ChunkMat& x, const ChunkMat& y) {
  double s = 0;
  for (size_t i = 0; i < x.a.size(); ++i) s += x.a[i] * y.a[i];
  return s;
}

// Row r of x scaled by s[r].
inline ChunkMat chunk_scale_rows(const std::vector<double>& s, ChunkMat x) {
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) x(i, j) *= s[size_t(i)];
  return x;
}

inline std::vector<double> chunk_rowdot(const ChunkMat& x, const ChunkMat& y) {
  std::vector<double> out(size_t(x.rows), 0.0);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) out[size_t(i)] += x(i, j) * y(i, j);
  return out;
}

// The decay quantities of one chunk of n tokens with log decays g (mamba2.md 4.1):
//   G_r = sum_{i<=r} g_i (chunk-local),  gam_r = exp(G_r),  kd_i = exp(G_{n-1} - G_i),
//   L[r, i] = exp(G_r - G_i) for r >= i, else 0.
// L is formed as exp(min(G_r - G_i, 0)) under the mask: the masked entries have a positive
// argument and would overflow, and inf * 0 is NaN.
struct ChunkDecay {
  std::vector<double> G, gam, kd;
  ChunkMat L;
  explicit ChunkDecay(const std::vector<double>& g) : G(g.size()), gam(g.size()), kd(g.size()) {
    const int64_t n = int64_t(g.size());
    double acc = 0;
    for (int64_t r = 0; r < n; ++r) G[size_t(r)] = acc += g[size_t(r)];
    L = ChunkMat(n, n);
    for (int64_t r = 0; r < n; ++r) {
      gam[size_t(r)] = std::exp(G[size_t(r)]);
      kd[size_t(r)] = std::exp(std::min(G[size_t(n - 1)] - G[size_t(r)], 0.0));
      for (int64_t i = 0; i <= r; ++i) L(r, i) = std::exp(std::min(G[size_t(r)] - G[size_t(i)], 0.0));
    }
  }
};

// y[r] = sum_{s >= r} x[s].
inline std::vector<double> chunk_revcumsum(const std::vector<double>& x) {
  std::vector<double> y(x.size());
  double acc = 0;
  for (size_t r = x.size(); r-- > 0;) y[r] = acc += x[r];
  return y;
}

}  // namespace hyb
