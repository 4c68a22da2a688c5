// Batched matrix product with optional transposes: C = op(A) op(B).
//   a: (..., M, K), or (..., K, M) with trans_a;  b: (..., K, N), or (..., N, K) with trans_b.
//   The batch dims of a and b are equal, or b is 2-D and shared by every batch of a (no trans_a).
// Backward (C = op(A) op(B)):  d op(A) = dC op(B)^T,  d op(B) = op(A)^T dC, transposed back as needed.
//   Var y = matmul(x, w, false, true);   // x (B, T, C) times w (N, C)^T -> (B, T, N)
#pragma once
#include "autograd/tape.h"

namespace hyb {

Tensor matmul_forward(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
Var matmul(const Var& a, const Var& b, bool trans_a = false, bool trans_b = false);

// Same product with explicit output and accumulation: c = alpha op(a) op(b) + beta c.
void matmul_into(const Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha = 1.0,
                 double beta = 0.0);

}  // namespace hyb
