// The token embedding module: "weight" (V, C). Its output is produced in the compute dtype.
#pragma once
#include "layers/module.h"

namespace hyb {

class Embedding : public Module {
 public:
  Embedding(int64_t vocab, int64_t dim, ParamInit init);
  Var forward(const Tensor& ids, DType compute) const;
  const Var& weight() const { return weight_; }

 private:
  Var weight_;
};

}  // namespace hyb
