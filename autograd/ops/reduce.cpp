#include "autograd/ops/reduce.h"

#include <algorithm>

#include "autograd/ops/broadcast.h"
#include "autograd/ops/unary.h"
#if HYBRID_CUDA
#include "autograd/ops/reduce_cuda.h"
#endif

namespace hyb {
namespace {

Shape keepdim_shape(const Shape& x, const std::vector<int64_t>& dims) {
  Shape s = x;
  for (int64_t d : dims) s[size_t(d)] = 1;
  return s;
}

Shape reduced_shape(const Shape& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim) return keepdim_shape(x, dims);
  Shape s;
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::binary_search(dims.begin(), dims.end(), int64_t(i))) s.push_back(x[i]);
  return s;
}

}  // namespace

std::vector<int64_t> reduce_dims(const char* op, const Shape& shape, const std::vector<int64_t>& dims) {
  const int64_t n = int64_t(shape.size());
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < n; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) {
    HYB_CHECK(d >= -n && d < n, op, ": dimension ", d, " out of range for ", shape_str(shape));
    out.push_back(d < 0 ? d + n : d);
  }
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i)
    HYB_CHECK(out[i] != out[i - 1], op, ": dimension ", out[i], " repeated in the dims of ", shape_str(shape));
  return out;
}

Tensor sum_forward(const Tensor& x, const std::vector<int64_t>& dims0, bool keepdim, double scale) {
  HYB_CHECK(x.defined(), "sum: undefined input");
  const std::vector<int64_t> dims = reduce_dims("sum", x.shape(), dims0);
  Tensor y;
#if HYBRID_CUDA
  if (x.is_cuda()) y = sum_forward_cuda(x, dims, scale);
#endif
  if (!y.defined()) y = sum_forward_cpu(x, dims, scale);
  return keepdim ? y : y.view(reduced_shape(x.shape(), dims, false));
}

Tensor sum_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int64_t>& dims0, bool keepdim,
                    double scale) {
  const std::vector<int64_t> dims = reduce_dims("sum", x_shape, dims0);
  const Shape kept = keepdim_shape(x_shape, dims);
  HYB_CHECK(dy.shape() == reduced_shape(x_shape, dims, keepdim), "sum: backward got dy ", shape_str(dy.shape()),
            " for an input ", shape_str(x_shape));
  Tensor spread = expand_view(dy.reshape(kept), x_shape);
  return scale == 1.0 ? spread.contiguous() : affine_forward(spread, scale, 0.0);
}

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  HYB_CHECK(broadcasts_to(shape, g.shape()), "sum_to_shape: ", shape_str(shape), " does not broadcast to ",
            shape_str(g.shape()));
  const size_t lead = g.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < g.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) dims.push_back(int64_t(i));
  if (dims.empty()) return g.reshape(shape);  // only leading dims of size 1 differ
  return sum_forward(g, dims, true).view(shape);
}

namespace {

Var reduce(const char* op, const Var& x, const std::vector<int64_t>& dims0, bool keepdim, bool is_mean) {
  const std::vector<int64_t> dims = reduce_dims(op, x.shape(), dims0);
  int64_t n = 1;
  for (int64_t d : dims) n *= x.shape()[size_t(d)];
  const double scale = is_mean ? 1.0 / double(n) : 1.0;
  HYB_CHECK(!is_mean || n > 0, op, ": mean over an empty selection of ", shape_str(x.shape()));
  Tensor y = sum_forward(x.data(), dims, keepdim, scale);
  return record_op1(op, {x}, y, [x_shape = x.shape(), dims, keepdim, scale](const Tensor& dy, GradMask) {
    return Grads{sum_backward(dy, x_shape, dims, keepdim, scale)};
  });
}

}  // namespace

Var sum(const Var& x, const std::vector<int64_t>& dims, bool keepdim) { return reduce("sum", x, dims, keepdim, false); }
Var mean(const Var& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce("mean", x, dims, keepdim, true);
}

}  // namespace hyb
