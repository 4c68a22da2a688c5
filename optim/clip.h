// Global gradient-norm clipping (config.md 6.6): ||g|| over all parameters in fp32/fp64, then every
// gradient times min(1, c / (||g|| + 1e-6)) when c > 0. Returns ||g|| (logged every step).
#pragma once
#include <vector>

#include "optim/adamw.h"

namespace hyb {

double global_grad_norm(const std::vector<OptimParam>& params);
double clip_grad_norm(const std::vector<OptimParam>& params, double max_norm);
// The factor clip_grad_norm scales the gradients by for a global norm: max_norm / (norm + 1e-6)
// when that is below 1, else 1 (also for max_norm <= 0 or a non-finite norm).
double clip_factor(double norm, double max_norm);

}  // namespace hyb
