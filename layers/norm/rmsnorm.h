// The RMSNorm module: one gain vector "weight" (C,), initialised to 1.
#pragma once
#include "layers/module.h"

namespace hyb {

class RmsNorm : public Module {
 public:
  RmsNorm(int64_t dim, double eps);
  Var forward(const Var& x) const;

 private:
  double eps_;
  Var weight_;
};

}  // namespace hyb
