#include "autograd/ops/matmul.h"

#include "core/dispatch.h"
#include "kernels/gemm_cpu.h"
#if HYBRID_CUDA
#include "kernels/gemm_cuda.h"
#endif

namespace hyb {
namespace {

struct MatmulDims {
  int64_t batch, M, N, K;
  bool shared_b;  // b is 2-D and applies to every batch of a
};

MatmulDims matmul_dims(const char* op, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  HYB_CHECK(a.dim() >= 2 && b.dim() >= 2, op, ": a ", shape_str(a.shape()), " and b ", shape_str(b.shape()),
            " must both have at least 2 dimensions");
  HYB_CHECK(a.dtype() == b.dtype(), op, ": a is ", dtype_name(a.dtype()), " but b is ", dtype_name(b.dtype()));
  check_same_device(op, a, b);
  MatmulDims d;
  d.M = ta ? a.size(-1) : a.size(-2);
  const int64_t ka = ta ? a.size(-2) : a.size(-1);
  d.K = tb ? b.size(-1) : b.size(-2);
  d.N = tb ? b.size(-2) : b.size(-1);
  HYB_CHECK(ka == d.K, op, ": inner dimensions differ: a ", shape_str(a.shape()), (ta ? " (transposed)" : ""), " and b ",
            shape_str(b.shape()), (tb ? " (transposed)" : ""), " give K = ", ka, " and ", d.K);
  d.batch = 1;
  for (int64_t i = 0; i + 2 < a.dim(); ++i) d.batch *= a.size(i);
  d.shared_b = b.dim() == 2 && a.dim() > 2;
  if (!d.shared_b) {
    HYB_CHECK(a.dim() == b.dim() && std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin()), op,
              ": batch dimensions of a ", shape_str(a.shape()), " and b ", shape_str(b.shape()), " differ");
  } else {
    HYB_CHECK(!ta, op, ": a shared 2-D b needs an untransposed a, got a ", shape_str(a.shape()), " transposed");
  }
  return d;
}

Shape matmul_out_shape(const Tensor& a, const MatmulDims& d) {
  Shape s(a.shape().begin(), a.shape().end() - 2);
  s.push_back(d.M);
  s.push_back(d.N);
  return s;
}

void matmul_into_cpu(const Tensor& c, const Tensor& a0, const Tensor& b0, bool ta, bool tb, const MatmulDims& d,
                     double alpha, double beta) {
  Tensor a = a0.contiguous(), b = b0.contiguous();
  visit_float("matmul", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* A = a.data<T>();
    const T* B = b.data<T>();
    T* C = c.data<T>();
    const int64_t lda = a.size(-1), ldb = b.size(-1);
    if (d.shared_b) {
      // (batch * M, K) x (K, N): one product, so the blocking sees all rows at once.
      gemm_cpu<T>(false, tb, d.batch * d.M, d.N, d.K, T(alpha), A, lda, B, ldb, T(beta), C, d.N);
      return;
    }
    for (int64_t i = 0; i < d.batch; ++i)
      gemm_cpu<T>(ta, tb, d.M, d.N, d.K, T(alpha), A + i * d.M * d.K, lda, B + i * d.K * d.N, ldb, T(beta),
                  C + i * d.M * d.N, d.N);
  });
}

}  // namespace

void matmul_into(const Tensor& c, const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha, double beta) {
  MatmulDims d = matmul_dims("matmul", a, b, ta, tb);
  HYB_CHECK(c.shape() == matmul_out_shape(a, d) && c.is_contiguous() && c.dtype() == a.dtype(),
            "matmul: output ", c.str(), " must be a contiguous ", dtype_name(a.dtype()), " ",
            shape_str(matmul_out_shape(a, d)));
  c.bump_version();
#if HYBRID_CUDA
  if (c.is_cuda()) return matmul_into_cuda(c, a, b, ta, tb, d.batch, d.M, d.N, d.K, d.shared_b, alpha, beta);
#endif
  matmul_into_cpu(c, a, b, ta, tb, d, alpha, beta);
}

Tensor matmul_forward(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  MatmulDims d = matmul_dims("matmul", a, b, ta, tb);
  Tensor c = Tensor::empty(matmul_out_shape(a, d), a.dtype(), a.device());
  matmul_into(c, a, b, ta, tb);
  return c;
}

Var matmul(const Var& a, const Var& b, bool ta, bool tb) {
  Tensor c = matmul_forward(a.data(), b.data(), ta, tb);
  const bool shared_b = b.dim() == 2 && a.dim() > 2;
  // Each side is saved only when the other side's gradient needs it.
  Tensor sa = b.requires_grad() ? a.data() : Tensor();
  Tensor sb = a.requires_grad() ? b.data() : Tensor();
  return record_op1(
      "matmul", {a, b}, c,
      [sa, sb, ta, tb, shared_b](const Tensor& dc, GradMask need) {
        Grads g(2);
        if (need[0]) g[0] = ta ? matmul_forward(sb, dc, tb, true) : matmul_forward(dc, sb, false, !tb);
        if (need[1]) {
          if (shared_b) {
            // Fold the batch into rows: dB = A_flat^T dC_flat (or its transpose).
            Tensor a2 = sa.reshape({-1, sa.size(-1)}), dc2 = dc.reshape({-1, dc.size(-1)});
            g[1] = tb ? matmul_forward(dc2, a2, true, false) : matmul_forward(a2, dc2, true, false);
          } else {
            g[1] = tb ? matmul_forward(dc, sa, true, ta) : matmul_forward(sa, dc, !ta, false);
          }
        }
        return g;
      },
      {{"a", sa}, {"b", sb}});
}

}  // namespace hyb
