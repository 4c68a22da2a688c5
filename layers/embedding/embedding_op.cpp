#include "layers/embedding/embedding_op.h"

namespace hyb {

Tensor embedding_forward(const Tensor& ids, const Tensor& w) {
  check_dtype("embedding", ids, "ids", {DType::i32});
  HYB_CHECK(w.dim() == 2, "embedding: weight must be (V, C), got ", shape_str(w.shape()));
  check_same_device("embedding", ids, w);
#if HYBRID_CUDA
  if (w.is_cuda()) return embedding_forward_cuda(ids, w);
#endif
  return embedding_forward_cpu(ids, w);
}

Tensor embedding_backward(const Tensor& ids, const Tensor& dout, int64_t vocab) {
#if HYBRID_CUDA
  if (dout.is_cuda()) return embedding_backward_cuda(ids, dout, vocab);
#endif
  return embedding_backward_cpu(ids, dout, vocab);
}

Var embedding(const Tensor& ids, const Var& w) {
  Tensor out = embedding_forward(ids, w.data());
  const int64_t vocab = w.size(0);
  const DType wdt = w.dtype();
  return record_op1("embedding", {w}, out, [ids, vocab, wdt](const Tensor& dout, GradMask) {
    return Grads{embedding_backward(ids, dout, vocab).to(wdt)};
  });
}

}  // namespace hyb
