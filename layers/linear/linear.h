// The Linear module: weight (out, in) and an optional bias (out,), named "weight" and "bias".
//   Linear proj(768, 2304, /*bias=*/false, ParamInit::normal(0.02));
//   Var y = proj.forward(x);   // x (..., 768) -> (..., 2304)
#pragma once
#include "layers/module.h"

namespace hyb {

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, ParamInit weight_init);
  Var forward(const Var& x) const;
  const Var& weight() const { return weight_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Var weight_, bias_;
};

}  // namespace hyb
