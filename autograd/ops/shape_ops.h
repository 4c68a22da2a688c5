// Shape changes as differentiable ops. The forward is a view of the input wherever the Tensor API
// gives one (reshape of contiguous data, view, transpose, permute, slice, narrow, squeeze, unsqueeze,
// expand, and each piece of split); concat and contiguous copy. Backwards:
//   reshape/view/squeeze/unsqueeze: dy reshaped back      transpose/permute: dy with the inverse order
//   slice/narrow: zeros of x's shape with dy in the slice  split: the pieces' gradients concatenated
//   concat: dy cut into the inputs' pieces                 expand: dy summed back (sum_to_shape)
//   contiguous: dy
// None of them needs a kernel: copies go through Tensor::copy_, sums through reduce.h.
//   Var q = permute(reshape(x, {B, T, H, D}), {0, 2, 1, 3});
//   std::vector<Var> qkv = split(proj, {C, C, C}, -1);
#pragma once
#include "autograd/tape.h"

namespace hyb {

Var reshape(const Var& x, const Shape& shape);  // one size may be -1; a copy when x is not contiguous
Var view(const Var& x, const Shape& shape);     // x must be contiguous
Var transpose(const Var& x, int64_t a, int64_t b);
Var permute(const Var& x, const std::vector<int64_t>& order);
Var slice(const Var& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);  // Tensor::slice's rules
Var narrow(const Var& x, int64_t dim, int64_t start, int64_t length);
Var contiguous(const Var& x);  // x itself when already contiguous
Var unsqueeze(const Var& x, int64_t dim);
Var squeeze(const Var& x, int64_t dim);
Var expand(const Var& x, const Shape& shape);  // numpy broadcast to shape; -1 keeps a size
Var concat(const std::vector<Var>& xs, int64_t dim);
std::vector<Var> split(const Var& x, const std::vector<int64_t>& sizes, int64_t dim);  // sizes sum to x.size(dim)

// Tensor-level pieces the Var ops use (the views themselves are Tensor methods).
Tensor concat_forward(const std::vector<Tensor>& xs, int64_t dim);
Tensor slice_backward(const Tensor& dy, const Shape& x_shape, int64_t dim, int64_t start, int64_t end, int64_t step);
// douts[i] may be undefined (that piece was not used): its part of dx is zero.
Tensor split_backward(const Grads& douts, const Shape& x_shape, DType dtype, Device device,
                      const std::vector<int64_t>& sizes, int64_t dim);

}  // namespace hyb
