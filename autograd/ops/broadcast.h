// Numpy broadcasting for the elementwise ops: shapes align at the last dimension, a missing leading
// dimension or a dimension of size 1 repeats to match the other side.
//   Shape s = broadcast_shapes("add", {3, 1, 5}, {4, 5});   // (3, 4, 5)
//   Tensor v = expand_view(b, s);                            // stride 0 along the repeated dims, no copy
// The reverse direction, summing a gradient back to an input's shape, is sum_to_shape (reduce.h).
#pragma once
#include "core/tensor.h"

namespace hyb {

// Throws "<op>: cannot broadcast a (2, 3) with b (4, 3)" when a dimension differs and neither is 1.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// True when `from` broadcasts to `to` (to may only add leading dims and grow dims of size 1).
bool broadcasts_to(const Shape& from, const Shape& to);

// A view of t with shape `to`: repeated dims get stride 0. Throws "<op>: cannot expand ... to ...".
Tensor expand_view(const Tensor& t, const Shape& to, const char* op = "expand");

}  // namespace hyb
