// The SwiGLU MLP of the standard block (attention.md 7): down( silu(gate(u)) * up(u) ), no biases.
// Parameter names gate_proj, up_proj, down_proj (config.md 3.4).
#pragma once
#include "layers/linear/linear.h"

namespace hyb {

class SwigluMlp : public Module {
 public:
  // down_std: the residual-projection std (init_std / sqrt(2 L) under the GPT-2 rule).
  SwigluMlp(int64_t d_model, int64_t hidden, double init_std, double down_std);
  Var forward(const Var& x) const;

 private:
  Linear *gate_, *up_, *down_;
};

}  // namespace hyb
