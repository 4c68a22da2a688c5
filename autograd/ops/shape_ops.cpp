#include "autograd/ops/shape_ops.h"

#include "autograd/ops/broadcast.h"
#include "autograd/ops/reduce.h"

namespace hyb {
namespace {

// Backward of the ops whose gradient is dy in x's shape.
Var reshaping(const char* op, const Var& x, Tensor y) {
  return record_op1(op, {x}, std::move(y),
                    [x_shape = x.shape()](const Tensor& dy, GradMask) { return Grads{dy.reshape(x_shape)}; });
}

}  // namespace

Var reshape(const Var& x, const Shape& shape) { return reshaping("reshape", x, x.data().reshape(shape)); }
Var view(const Var& x, const Shape& shape) { return reshaping("view", x, x.data().view(shape)); }
Var unsqueeze(const Var& x, int64_t dim) { return reshaping("unsqueeze", x, x.data().unsqueeze(dim)); }
Var squeeze(const Var& x, int64_t dim) { return reshaping("squeeze", x, x.data().squeeze(dim)); }

Var transpose(const Var& x, int64_t a, int64_t b) {
  return record_op1("transpose", {x}, x.data().transpose(a, b),
                    [a, b](const Tensor& dy, GradMask) { return Grads{dy.transpose(a, b)}; });
}

Var permute(const Var& x, const std::vector<int64_t>& order) {
  Tensor y = x.data().permute(order);
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[size_t(x.data().wrap_dim(order[i]))] = int64_t(i);
  return record_op1("permute", {x}, y, [inverse](const Tensor& dy, GradMask) { return Grads{dy.permute(inverse)}; });
}

Tensor slice_backward(const Tensor& dy, const Shape& x_shape, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Tensor dx = Tensor::zeros(x_shape, dy.dtype(), dy.device());
  dx.slice(dim, start, end, step).copy_(dy);
  return dx;
}

Var slice(const Var& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return record_op1("slice", {x}, x.data().slice(dim, start, end, step),
                    [x_shape = x.shape(), dim, start, end, step](const Tensor& dy, GradMask) {
                      return Grads{slice_backward(dy, x_shape, dim, start, end, step)};
                    });
}

Var narrow(const Var& x, int64_t dim, int64_t start, int64_t length) {
  return record_op1("narrow", {x}, x.data().narrow(dim, start, length),
                    [x_shape = x.shape(), dim, start, length](const Tensor& dy, GradMask) {
                      return Grads{slice_backward(dy, x_shape, dim, start, start + length, 1)};
                    });
}

Var contiguous(const Var& x) {
  if (x.data().is_contiguous()) return x;
  return record_op1("contiguous", {x}, x.data().contiguous(), [](const Tensor& dy, GradMask) { return Grads{dy}; });
}

Var expand(const Var& x, const Shape& shape) {
  // -1 keeps the input's size of the dimension it aligns with (from the right).
  Shape to = shape;
  const int64_t lead = int64_t(to.size()) - x.dim();
  for (int64_t i = 0; i < int64_t(to.size()); ++i) {
    if (to[size_t(i)] != -1) continue;
    HYB_CHECK(i >= lead, "expand: -1 at new leading dimension ", i, " of ", shape_str(shape), " for ",
              shape_str(x.shape()));
    to[size_t(i)] = x.shape()[size_t(i - lead)];
  }
  return record_op1("expand", {x}, expand_view(x.data(), to, "expand"),
                    [x_shape = x.shape()](const Tensor& dy, GradMask) { return Grads{sum_to_shape(dy, x_shape)}; });
}

Tensor concat_forward(const std::vector<Tensor>& xs, int64_t dim) {
  HYB_CHECK(!xs.empty(), "concat: no inputs");
  const Tensor& x0 = xs[0];
  const int64_t d = x0.wrap_dim(dim);
  Shape out = x0.shape();
  out[size_t(d)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    bool fits = x.dim() == x0.dim();
    for (int64_t k = 0; fits && k < x.dim(); ++k) fits = k == d || x.size(k) == x0.size(k);
    HYB_CHECK(fits, "concat: input ", i, " is ", shape_str(x.shape()), " but input 0 is ", shape_str(x0.shape()),
              "; all sizes except dimension ", d, " must match");
    HYB_CHECK(x.dtype() == x0.dtype(), "concat: input ", i, " is ", dtype_name(x.dtype()), " but input 0 is ",
              dtype_name(x0.dtype()));
    check_same_device("concat", x0, x);
    out[size_t(d)] += x.size(d);
  }
  Tensor y = Tensor::empty(out, x0.dtype(), x0.device());
  int64_t off = 0;
  for (const Tensor& x : xs) {
    y.narrow(d, off, x.size(d)).copy_(x);
    off += x.size(d);
  }
  return y;
}

Var concat(const std::vector<Var>& xs, int64_t dim) {
  std::vector<Tensor> data;
  for (const Var& x : xs) data.push_back(x.data());
  Tensor y = concat_forward(data, dim);
  const int64_t d = y.wrap_dim(dim);
  std::vector<int64_t> sizes;
  for (const Var& x : xs) sizes.push_back(x.size(d));
  return record_op1("concat", xs, y, [sizes, d](const Tensor& dy, GradMask need) {
    Grads g(sizes.size());
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (need[i]) g[i] = dy.narrow(d, off, sizes[i]);
      off += sizes[i];
    }
    return g;
  });
}

Tensor split_backward(const Grads& douts, const Shape& x_shape, DType dtype, Device device,
                      const std::vector<int64_t>& sizes, int64_t dim) {
  bool all = true;
  for (const Tensor& g : douts) all = all && g.defined();
  if (all) return concat_forward(douts, dim);
  Tensor dx = Tensor::zeros(x_shape, dtype, device);
  int64_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (douts[i].defined()) dx.narrow(dim, off, sizes[i]).copy_(douts[i]);
    off += sizes[i];
  }
  return dx;
}

std::vector<Var> split(const Var& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t d = x.data().wrap_dim(dim);
  int64_t total = 0;
  for (int64_t s : sizes) {
    HYB_CHECK(s >= 0, "split: negative size ", s, " in ", shape_str(sizes));
    total += s;
  }
  HYB_CHECK(total == x.size(d), "split: sizes ", shape_str(sizes), " sum to ", total, " but dimension ", d, " of ",
            shape_str(x.shape()), " is ", x.size(d));
  std::vector<Tensor> pieces;
  int64_t off = 0;
  for (int64_t s : sizes) {
    pieces.push_back(x.data().narrow(d, off, s));
    off += s;
  }
  return record_op("split", {x}, pieces,
                   [x_shape = x.shape(), dtype = x.dtype(), device = x.device(), sizes, d](const Grads& douts,
                                                                                          GradMask) {
                     return Grads{split_backward(douts, x_shape, dtype, device, sizes, d)};
                   });
}

}  // namespace hyb
