// C = alpha * op(A) op(B) + beta * C on the CPU, for f32 and f64. op(A) is M x K, op(B) is K x N;
// A (i, k) sits at A[i * lda + k], or A[k * lda + i] when trans_a. Cache-blocked (KC x NC panels of
// B packed once, MC x KC panels of A packed per thread) around a 6 x (64 bytes) register tile, and
// threaded over the rows of C. Good enough for the CPU quickstart; docs/performance.md has figures.
#pragma once
#include <cstdint>

namespace hyb {

template <typename T>
void gemm_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
              const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

}  // namespace hyb
