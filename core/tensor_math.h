// Non-differentiable whole-tensor arithmetic used by autograd (gradient accumulation), the
// optimizer and the trainer (norms, finiteness). Device-dispatched; contiguous tensors only.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace hyb {

void add_(const Tensor& dst, const Tensor& src, double alpha = 1.0);  // dst += alpha * src
void scale_(const Tensor& t, double s);                                // t *= s
double sum_squares(const Tensor& t);                                   // fp64 result (fp32 partials on GPU)
// The same for each tensor of a list on one device, with one wait for the device instead of one per
// tensor (a gradient norm over a model's ~150 parameters).
std::vector<double> sum_squares_each(const std::vector<Tensor>& ts);
bool all_finite(const Tensor& t);

}  // namespace hyb
