// Row-major GEMM on the device through cuBLASLt: c = alpha op(a) op(b) + beta c, optionally + bias.
// Shapes and flags as autograd/ops/matmul.h (which checks them and calls in): a (batch.., M, K) or
// transposed, b likewise or a 2-D b shared by every batch (folded into rows: one GEMM of batch*M rows).
// f32 computes in true fp32 (CUBLAS_COMPUTE_32F, no TF32), bf16 in fp32 with bf16 in and out, f64 in fp64.
//   matmul_into_cuda(c, x, w, false, true, 1, rows, out, in, true, 1.0, 0.0);   // c = x w^T
//   matmul_bias_into_cuda(y, x, w, bias, false, true, 1, rows, out, in, true); // y = x w^T + bias
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hyb {

void matmul_into_cuda(const Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, int64_t batch,
                      int64_t M, int64_t N, int64_t K, bool shared_b, double alpha, double beta);

// c = op(a) op(b) + bias, bias (N,) added to every row, through cuBLASLt's bias epilogue (no extra pass).
// bias is f32 or c's dtype. cuBLASLt reads it in c's dtype, so an f32 bias for a bf16 c is rounded to bf16
// first (one small conversion kernel), then added to the fp32 accumulator before c is rounded.
void matmul_bias_into_cuda(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a,
                           bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, bool shared_b);

}  // namespace hyb
