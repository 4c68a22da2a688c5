// Finite-difference check of an op's hand-written backward, in float64.
// The op's outputs are reduced with fixed random weights r: L = sum_k <out_k, r_k>. The analytic
// gradient comes from backward(); the numeric one from central differences of L per element.
//   auto res = gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{silu(x[0])}; },
//                        {random_tensor({3, 5})});
//   REQUIRE(res.max_error < 1e-6);   // res.report names each input and its error
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "autograd/tape.h"

namespace hyb {

struct GradcheckOptions {
  double eps = 1e-6;
  uint64_t seed = 20240520;
  std::vector<bool> check;  // which inputs to check (default: every floating input)
};

struct GradcheckResult {
  std::vector<double> error;  // per input: ||num - ana|| / max(||num||, ||ana||); 0 when both vanish
  double max_error = 0;
  std::string report;         // one line per checked input
};

using GradcheckFn = std::function<std::vector<Var>(const std::vector<Var>&)>;
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt = {});

// The same check on leaves that already exist (a module's f64 parameters): fn reads them, and
// their data is perturbed in place, one element at a time. Their .grad is overwritten.
//   ParameterScope f64(Device::cpu(), DType::f64);  Block block(...);  block.initialize(1);
//   auto r = gradcheck_leaves([&] { return std::vector<Var>{block.forward(x)}; }, leaves_of(block));
GradcheckResult gradcheck_leaves(const std::function<std::vector<Var>()>& fn, const std::vector<Var>& leaves,
                                 const std::vector<std::string>& names, const GradcheckOptions& opt = {});

// Random N(0, 1) tensor from a Philox stream, for tests (never zeros).
Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::f64, double std = 1.0, double mean = 0.0);

}  // namespace hyb
