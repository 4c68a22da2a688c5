#include "optim/clip.h"

#include <cmath>

#include "core/tensor_math.h"

namespace hyb {

double global_grad_norm(const std::vector<OptimParam>& params) {
  std::vector<Tensor> grads;
  for (const OptimParam& p : params)
    if (p.var.grad().defined()) grads.push_back(p.var.grad());
  double ss = 0;
  for (double s : sum_squares_each(grads)) ss += s;
  return std::sqrt(ss);
}

double clip_grad_norm(const std::vector<OptimParam>& params, double max_norm) {
  const double norm = global_grad_norm(params);
  if (max_norm > 0 && std::isfinite(norm)) {
    const double f = max_norm / (norm + 1e-6);
    if (f < 1)
      for (const OptimParam& p : params)
        if (p.var.grad().defined()) scale_(p.var.grad(), f);
  }
  return norm;
}

}  // namespace hyb
