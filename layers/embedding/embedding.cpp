#include "layers/embedding/embedding.h"

#include "layers/embedding/embedding_op.h"

namespace hyb {

Embedding::Embedding(int64_t vocab, int64_t dim, ParamInit init) {
  weight_ = register_parameter("weight", {vocab, dim}, std::move(init));
}

Var Embedding::forward(const Tensor& ids, DType compute) const { return embedding(ids, compute_view(weight_, compute)); }

}  // namespace hyb
