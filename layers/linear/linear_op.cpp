#include "layers/linear/linear_op.h"

#include "autograd/ops/matmul.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#if HYBRID_CUDA
#include "layers/linear/linear_cuda.h"
#endif

namespace hyb {

static void check_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  HYB_CHECK(w.dim() == 2, "linear: weight must be (out, in), got ", shape_str(w.shape()));
  HYB_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "linear: x is ", shape_str(x.shape()), " but weight is ",
            shape_str(w.shape()), "; x's last dimension must equal in = ", w.size(1));
  HYB_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)), "linear: bias is ", shape_str(b.shape()),
            " but weight is ", shape_str(w.shape()), "; bias must be (", w.size(0), ",)");
}

void add_bias_(const Tensor& y, const Tensor& b) {
  HYB_CHECK(y.is_contiguous() && y.size(-1) == b.size(0) && y.dtype() == b.dtype(), "add_bias_: y ", y.str(),
            " and bias ", b.str(), " do not fit");
  y.bump_version();
#if HYBRID_CUDA
  if (y.is_cuda()) return add_bias_cuda(y, b);
#endif
  visit_float("add_bias_", y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* yp = y.data<T>();
    const T* bp = b.contiguous().data<T>();
    const int64_t n = b.size(0), rows = y.numel() / n;
    parallel_for(rows, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r)
        for (int64_t j = 0; j < n; ++j) yp[r * n + j] += bp[j];
    });
  });
}

Tensor bias_grad(const Tensor& dy0) {
  Tensor dy = dy0.contiguous();
#if HYBRID_CUDA
  if (dy.is_cuda()) return bias_grad_cuda(dy);
#endif
  const int64_t n = dy.size(-1), rows = dy.numel() / n;
  Tensor db = Tensor::zeros({n}, dy.dtype());
  visit_float("bias_grad", dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    T* out = db.data<T>();
    parallel_for(n, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = lo; j < hi; ++j) out[j] += g[r * n + j];
    });
  });
  return db;
}

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_linear(x, w, b);
  Tensor x2 = x.reshape({-1, x.size(-1)});
  Tensor y = matmul_forward(x2, w, false, true);
  if (b.defined()) add_bias_(y, b);
  Shape out = x.shape();
  out.back() = w.size(0);
  return y.view(out);
}

LinearGrads linear_backward(const LinearSaved& s, const Tensor& dy, bool need_dx, bool need_dw, bool need_db) {
  LinearGrads g;
  Tensor dy2 = dy.reshape({-1, dy.size(-1)});
  if (need_dx) {
    Shape in = dy.shape();
    in.back() = s.w.size(1);
    g.dx = matmul_forward(dy2, s.w, false, false).view(in);
  }
  if (need_dw) g.dw = matmul_forward(dy2, s.x.reshape({-1, s.x.size(-1)}), true, false);
  if (need_db) g.db = bias_grad(dy2);
  return g;
}

Var linear(const Var& x, const Var& w, const Var& b) {
  Tensor y = linear_forward(x.data(), w.data(), b.defined() ? b.data() : Tensor());
  LinearSaved s;
  s.x = w.requires_grad() ? x.data() : Tensor();
  s.w = x.requires_grad() ? w.data() : Tensor();
  s.has_bias = b.defined();
  std::vector<Var> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  return record_op1(
      "linear", inputs, y,
      [s](const Tensor& dy, GradMask need) {
        LinearGrads g = linear_backward(s, dy, need[0], need[1], s.has_bias && need[2]);
        Grads out{g.dx, g.dw};
        if (s.has_bias) out.push_back(g.db);
        return out;
      },
      {{"x", s.x}, {"w", s.w}});
}

}  // namespace hyb
