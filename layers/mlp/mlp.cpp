#include "layers/mlp/mlp.h"

#include "layers/mlp/swiglu_op.h"

namespace hyb {

SwigluMlp::SwigluMlp(int64_t d_model, int64_t hidden, double init_std, double down_std) {
  gate_ = register_module("gate_proj", std::make_unique<Linear>(d_model, hidden, false, ParamInit::normal(init_std)));
  up_ = register_module("up_proj", std::make_unique<Linear>(d_model, hidden, false, ParamInit::normal(init_std)));
  down_ = register_module("down_proj", std::make_unique<Linear>(hidden, d_model, false, ParamInit::normal(down_std)));
}

Var SwigluMlp::forward(const Var& x) const { return down_->forward(swiglu(gate_->forward(x), up_->forward(x))); }

}  // namespace hyb
