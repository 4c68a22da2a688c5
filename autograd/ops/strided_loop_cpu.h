// The loop the CPU elementwise ops share: N operands of one shape, any strides (0 along broadcast
// dims), walked as rows. Dims that are laid out contiguously in every operand are merged first, so
// equal contiguous shapes become one long row and a bias-style (N, C) + (C,) becomes N rows of C with
// unit strides; the body then runs a plain pointer loop the compiler vectorises.
//   for_each_row_cpu<float, 3>(out.shape(), {out.strides(), a.strides(), b.strides()}, {y, pa, pb},
//                              [&](const auto& p, const auto& s, int64_t n) { ... p[0][i * s[0]] ... });
#pragma once
#include <array>

#include "core/parallel.h"
#include "core/tensor.h"

namespace hyb {

template <typename T, size_t N, typename Body>
void for_each_row_cpu(const Shape& shape, const std::array<Shape, N>& strides, std::array<T*, N> base, Body&& body) {
  // Merge dims inner to outer; size-1 dims are dropped (their stride never matters).
  Shape size;
  std::array<Shape, N> st;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    if (shape[size_t(d)] == 1) continue;
    bool merge = !size.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = strides[k][size_t(d)] == st[k].back() * size.back();
    if (merge) {
      size.back() *= shape[size_t(d)];
      continue;
    }
    size.push_back(shape[size_t(d)]);
    for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][size_t(d)]);
  }
  if (shape_numel(shape) == 0) return;
  if (size.empty()) {  // every dim is 1: one element
    std::array<int64_t, N> one;
    one.fill(1);
    body(base, one, int64_t(1));
    return;
  }
  // size[0] is now the innermost dimension.
  const int64_t inner = size[0];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = st[k][0];
  const int64_t rows = shape_numel(shape) / inner;
  if (rows == 1) {
    parallel_for(inner, 1 << 15, [&](int64_t lo, int64_t hi) {
      std::array<T*, N> p;
      for (size_t k = 0; k < N; ++k) p[k] = base[k] + lo * inner_stride[k];
      body(p, inner_stride, hi - lo);
    });
    return;
  }
  parallel_for(rows, std::max<int64_t>(1, (1 << 15) / inner), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      std::array<T*, N> p = base;
      int64_t rem = r;
      for (size_t d = 1; d < size.size(); ++d) {
        const int64_t idx = rem % size[d];
        rem /= size[d];
        for (size_t k = 0; k < N; ++k) p[k] += idx * st[k][d];
      }
      body(p, inner_stride, inner);
    }
  });
}

}  // namespace hyb
