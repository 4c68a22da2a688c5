#include "layers/loss/cross_entropy_op.h"

namespace hyb {

CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab,
                                         int32_t ignore_index) {
  HYB_CHECK(logits.dim() == 2, "cross_entropy: logits must be (N, V), got ", shape_str(logits.shape()));
  check_dtype("cross_entropy", targets, "targets", {DType::i32});
  HYB_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), "cross_entropy: logits are ",
            shape_str(logits.shape()), " but targets are ", shape_str(targets.shape()), "; targets must be (N,)");
  HYB_CHECK(vocab >= 1 && vocab <= logits.size(1), "cross_entropy: vocab ", vocab, " outside [1, ", logits.size(1), "]");
  check_same_device("cross_entropy", logits, targets);
#if HYBRID_CUDA
  if (logits.is_cuda()) return cross_entropy_forward_cuda(logits, targets, vocab, ignore_index);
#endif
  return cross_entropy_forward_cpu(logits, targets, vocab, ignore_index);
}

int64_t CrossEntropyResult::count() const {
  const std::vector<double> t = tally.to_double_vector();
  HYB_CHECK(t.size() == 2, "cross_entropy: the tally holds ", t.size(), " values, expected 2");
  HYB_CHECK(t[1] == 0, "cross_entropy: ", int64_t(t[1]), " targets are outside [0, ", vocab, ")");
  return int64_t(t[0]);
}

Tensor cross_entropy_backward(const CrossEntropySaved& s, double dloss) {
#if HYBRID_CUDA
  if (s.logits.is_cuda()) return cross_entropy_backward_cuda(s, dloss);
#endif
  return cross_entropy_backward_cpu(s, dloss);
}

Var cross_entropy(const Var& logits, const Tensor& targets, int64_t vocab, int32_t ignore_index) {
  CrossEntropyResult r = cross_entropy_forward(logits.data(), targets, vocab, ignore_index);
  const int64_t count = r.count();
  HYB_CHECK(count > 0, "cross_entropy: every target equals the ignore index ", ignore_index);
  double total = 0;  // fp64 on the host (eval.md 0); ignored rows hold 0
  for (double v : r.nll.to_double_vector()) total += v;
  // The scalar loss lives on the host whatever the device: the trainer reads it every step anyway.
  Tensor loss = Tensor::full({1}, total / double(count), r.nll.dtype());
  CrossEntropySaved s{logits.data(), targets, r.lse, vocab, ignore_index, count};
  return record_op1(
      "cross_entropy", {logits}, loss,
      [s](const Tensor& dloss, GradMask) { return Grads{cross_entropy_backward(s, dloss.item())}; },
      {{"logits", s.logits}});
}

}  // namespace hyb
