// Sums and means over a set of dimensions, and sum_to_shape, the reduction that undoes a broadcast.
//   sum(x, dims, keepdim):  y = sum of x over dims; keepdim leaves them as size 1.  dx = dy repeated along dims
//   mean(x, dims, keepdim): y = sum / n, n = product of the reduced sizes.          dx = dy / n repeated
// An empty dims list reduces every dimension. Negative dims count from the end. The CPU reference
// accumulates in f64 in a fixed order, so results do not depend on the thread count.
//   Var s = sum(x, {0, 2}, /*keepdim=*/true);   // (3, 4, 5) -> (1, 4, 1)
//   Tensor db = sum_to_shape(dy, {5});          // (3, 4, 5) -> (5,)
#pragma once
#include "autograd/tape.h"

namespace hyb {

// The reduced dims, wrapped and sorted; throws "<op>: dimension 1 repeated ..." or out of range.
std::vector<int64_t> reduce_dims(const char* op, const Shape& shape, const std::vector<int64_t>& dims);

// scale multiplies the result (1 for sum, 1/n for mean).
Tensor sum_forward(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, double scale = 1.0);
// dx = scale * dy broadcast back to x_shape, dy shaped as sum_forward's result.
Tensor sum_backward(const Tensor& dy, const Shape& x_shape, const std::vector<int64_t>& dims, bool keepdim,
                    double scale = 1.0);

// Sums g over the dims along which `shape` was broadcast to g's shape (leading extra dims, and dims
// where shape has 1). Returns g itself when the shapes are equal.
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

Var sum(const Var& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Var mean(const Var& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

// CPU reference (reduce_cpu.cpp): dims wrapped and sorted; returns the keepdim shape.
Tensor sum_forward_cpu(const Tensor& x, const std::vector<int64_t>& dims, double scale);

}  // namespace hyb
