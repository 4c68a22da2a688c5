#include "optim/clip.h"

#include <algorithm>
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

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

double clip_grad_norm(const std::vector<OptimParam>& params, double max_norm) {
  const double norm = global_grad_norm(params);
  const double f = clip_factor(norm, max_norm);
  if (f < 1)
    for (const OptimParam& p : params)
      if (p.var.grad().defined()) scale_(p.var.grad(), f);
  return norm;
}

}  // namespace hyb
