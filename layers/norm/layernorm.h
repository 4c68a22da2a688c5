// The LayerNorm module: "weight" (C,) initialised to 1 and "bias" (C,) initialised to 0, neither in
// the weight-decay set (PyTorch nn.LayerNorm's parameters; the GSS branch's dss.norm, pha.md 4.2).
//   LayerNorm norm(256, 1e-5);  Var y = norm.forward(x);   // x (..., 256)
#pragma once
#include "layers/module.h"

namespace hyb {

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps);
  Var forward(const Var& x) const;

 private:
  double eps_;
  Var weight_, bias_;
};

}  // namespace hyb
