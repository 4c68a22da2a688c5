#include "layers/norm/layernorm.h"

#include "layers/norm/layernorm_op.h"

namespace hyb {

LayerNorm::LayerNorm(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", {dim}, ParamInit::constant(1.0), false);
  bias_ = register_parameter("bias", {dim}, ParamInit::constant(0.0), false);
}

Var LayerNorm::forward(const Var& x) const {
  return layernorm(x, compute_view(weight_, x.dtype()), compute_view(bias_, x.dtype()), eps_);
}

}  // namespace hyb
