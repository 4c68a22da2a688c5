#include "layers/linear/linear.h"

#include "layers/linear/linear_op.h"

namespace hyb {

Linear::Linear(int64_t in, int64_t out, bool bias, ParamInit weight_init) : in_(in), out_(out) {
  weight_ = register_parameter("weight", {out, in}, weight_init);
  if (bias) bias_ = register_parameter("bias", {out}, ParamInit::constant(0.0));
}

Var Linear::forward(const Var& x) const {
  return linear(x, compute_view(weight_, x.dtype()), bias_.defined() ? compute_view(bias_, x.dtype()) : Var());
}

}  // namespace hyb
