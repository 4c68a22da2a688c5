#include "kernels/gemm_cpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/parallel.h"

namespace hyb {
namespace {

template <typename T>
struct Tile {
  static constexpr int64_t MR = 6;
  static constexpr int64_t NR = 64 / sizeof(T);  // two AVX2 vectors (16 f32 or 8 f64)
  static constexpr int64_t KC = 256;
  static constexpr int64_t MC = 72;
  static constexpr int64_t NC = 3072;
};

// Packs op(B)[k0:k0+kc, j0:j0+nc] into column panels of NR: panel p holds, for each k, NR values.
template <typename T>
void pack_b(bool tb, const T* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* out) {
  constexpr int64_t NR = Tile<T>::NR;
  for (int64_t jp = 0; jp < nc; jp += NR) {
    const int64_t nr = std::min(NR, nc - jp);
    for (int64_t k = 0; k < kc; ++k) {
      T* dst = out + jp * kc + k * NR;
      for (int64_t j = 0; j < nr; ++j) {
        const int64_t row = k0 + k, col = j0 + jp + j;
        dst[j] = tb ? B[col * ldb + row] : B[row * ldb + col];
      }
      for (int64_t j = nr; j < NR; ++j) dst[j] = T(0);
    }
  }
}

// Packs op(A)[i0:i0+mc, k0:k0+kc] into row panels of MR: panel p holds, for each k, MR values.
template <typename T>
void pack_a(bool ta, const T* A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc, T* out) {
  constexpr int64_t MR = Tile<T>::MR;
  for (int64_t ip = 0; ip < mc; ip += MR) {
    const int64_t mr = std::min(MR, mc - ip);
    for (int64_t k = 0; k < kc; ++k) {
      T* dst = out + ip * kc + k * MR;
      for (int64_t i = 0; i < mr; ++i) {
        const int64_t row = i0 + ip + i, col = k0 + k;
        dst[i] = ta ? A[col * lda + row] : A[row * lda + col];
      }
      for (int64_t i = mr; i < MR; ++i) dst[i] = T(0);
    }
  }
}

// The register tile: acc (MR x NR) = sum_k a[k] b[k]^T, then C = alpha acc + beta C on the valid part.
// One 64-byte vector per row of the tile (GCC vector extension: one zmm, or two ymm without AVX-512).
template <typename T>
void micro_kernel(int64_t kc, const T* a, const T* b, T alpha, T beta, T* C, int64_t ldc, int64_t mr, int64_t nr) {
  constexpr int64_t MR = Tile<T>::MR, NR = Tile<T>::NR;
  typedef T Vec __attribute__((vector_size(64)));
  Vec acc[MR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    Vec bk;
    std::memcpy(&bk, b + k * NR, sizeof(Vec));
    const T* ak = a + k * MR;
    for (int64_t i = 0; i < MR; ++i) acc[i] += ak[i] * bk;
  }
  for (int64_t i = 0; i < mr; ++i) {
    T* c = C + i * ldc;
    if (beta == T(0)) {
      for (int64_t j = 0; j < nr; ++j) c[j] = alpha * acc[i][j];
    } else {
      for (int64_t j = 0; j < nr; ++j) c[j] = alpha * acc[i][j] + beta * c[j];
    }
  }
}

}  // namespace

template <typename T>
void gemm_cpu(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
              int64_t ldb, T beta, T* C, int64_t ldc) {
  using Tl = Tile<T>;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  const int64_t nc_max = std::min(Tl::NC, (N + Tl::NR - 1) / Tl::NR * Tl::NR);
  const int64_t kc_max = std::min(Tl::KC, K);
  std::vector<T> bpack(size_t(nc_max * kc_max));
  const int64_t m_blocks = (M + Tl::MC - 1) / Tl::MC;
  for (int64_t j0 = 0; j0 < N; j0 += Tl::NC) {
    const int64_t nc = std::min(Tl::NC, N - j0);
    for (int64_t k0 = 0; k0 < K; k0 += Tl::KC) {
      const int64_t kc = std::min(Tl::KC, K - k0);
      const T beta_k = k0 == 0 ? beta : T(1);
      const int64_t n_panels = (nc + Tl::NR - 1) / Tl::NR;
      parallel_for(n_panels, 4, [&](int64_t lo, int64_t hi) {
        pack_b(tb, B, ldb, k0, kc, j0 + lo * Tl::NR, std::min(nc, hi * Tl::NR) - lo * Tl::NR,
               bpack.data() + lo * Tl::NR * kc);
      });
      parallel_for(m_blocks, 1, [&](int64_t lo, int64_t hi) {
        std::vector<T> apack(size_t(Tl::MC * kc));
        for (int64_t mb = lo; mb < hi; ++mb) {
          const int64_t i0 = mb * Tl::MC, mc = std::min(Tl::MC, M - i0);
          pack_a(ta, A, lda, i0, mc, k0, kc, apack.data());
          for (int64_t jp = 0; jp < nc; jp += Tl::NR)
            for (int64_t ip = 0; ip < mc; ip += Tl::MR)
              micro_kernel(kc, apack.data() + ip * kc, bpack.data() + jp * kc, alpha, beta_k,
                           C + (i0 + ip) * ldc + j0 + jp, ldc, std::min(Tl::MR, mc - ip), std::min(Tl::NR, nc - jp));
        }
      });
    }
  }
}

template void gemm_cpu<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                              int64_t, float, float*, int64_t);
template void gemm_cpu<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                               int64_t, double, double*, int64_t);

}  // namespace hyb
