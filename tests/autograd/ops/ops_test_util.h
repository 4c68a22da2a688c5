// Helpers shared by the tests of the basic ops: a gradcheck that reports its per-input errors, a
// reference formula mapped over a tensor's values, and the binary ops by enum. Comparisons are compare.h's.
#pragma once
#include <catch2/catch.hpp>

#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops/binary.h"
#include "compare.h"

namespace hyb::test {

// Finite differences in f64 against the op's backward; the preamble's bound is 1e-6.
inline void require_gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double tol = 1e-6) {
  GradcheckResult r = gradcheck(fn, inputs);
  INFO(r.report);
  REQUIRE(r.max_error < tol);
}

// Elementwise f over the values of t, in f64.
template <typename F>
std::vector<double> map_values(const Tensor& t, F f) {
  std::vector<double> v = t.to_double_vector();
  for (double& x : v) x = f(x);
  return v;
}

// The Var op of a BinaryOp.
inline Var apply_binary(BinaryOp op, const Var& a, const Var& b) {
  switch (op) {
    case BinaryOp::add: return add(a, b);
    case BinaryOp::sub: return sub(a, b);
    case BinaryOp::mul: return mul(a, b);
    case BinaryOp::div: return div(a, b);
  }
  return Var();
}

}  // namespace hyb::test
