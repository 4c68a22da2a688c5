// CUDA-vs-CPU parity for an op: the f64 CPU reference (forward, then backward from random upstream
// gradients) is the truth; the same function runs on the GPU in f32 and bf16 on copies of the same
// inputs, and every output and every input gradient is compared by relative error. Integer inputs
// (ids, targets) are passed through unchanged.
//   auto r = cuda_parity([](const std::vector<Var>& x) { return std::vector<Var>{swiglu(x[0], x[1])}; },
//                        {random_tensor({37, 129}, 1), random_tensor({37, 129}, 2)});
//   INFO(r.report); REQUIRE(r.ok);
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "autograd/tape.h"

namespace hyb {

struct ParityOptions {
  double tol_f32 = 1e-5;
  double tol_bf16 = 2e-2;
  bool f32 = true, bf16 = true;
  uint64_t seed = 7;
};

struct ParityResult {
  bool ok = true;
  std::string report;  // one line per compared tensor: dtype, name, relative error, tolerance
};

using ParityFn = std::function<std::vector<Var>(const std::vector<Var>&)>;
ParityResult cuda_parity(const ParityFn& fn, const std::vector<Tensor>& inputs, const ParityOptions& opt = {});

}  // namespace hyb
