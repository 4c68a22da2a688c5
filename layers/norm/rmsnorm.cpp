#include "layers/norm/rmsnorm.h"

#include "layers/norm/rmsnorm_op.h"

namespace hyb {

RmsNorm::RmsNorm(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", {dim}, ParamInit::constant(1.0));
}

Var RmsNorm::forward(const Var& x) const { return rmsnorm(x, compute_view(weight_, x.dtype()), eps_); }

}  // namespace hyb
