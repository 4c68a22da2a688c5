// Cross-entropy of logits against integer targets, averaged over the rows that count.
//   logits (N, Vp), targets (N,) i32; a target equal to ignore_index is skipped; only the first
//   `vocab` columns take part (the padded columns Vp - vocab are neither targets nor in the
//   softmax, attention.md 7). loss = sum_n [lse_n - z_n,t_n] / count.
// Backward: dz_n,v = (softmax_n,v - [v = t_n]) dloss / count on counted rows and real columns, 0 elsewhere.
// Math in fp32 (f64 on the f64 CPU path), whatever the logits' dtype.
#pragma once
#include "autograd/tape.h"

namespace hyb {

struct CrossEntropySaved {
  Tensor logits;   // (N, Vp)
  Tensor targets;  // (N,) i32
  Tensor lse;      // (N,) f32/f64: log-sum-exp over the real columns
  int64_t vocab = 0;
  int32_t ignore_index = -1;
  int64_t count = 0;  // rows that count
};

struct CrossEntropyResult {
  Tensor nll;     // (N,) per-row negative log-likelihood (0 on ignored rows), f32/f64
  Tensor lse;     // (N,)
  Tensor argmax;  // (N,) i32: the largest logit's column (ties to the lowest), for token accuracy
  // (2,) i64 on the logits' device: the rows that count and the rows whose target is outside
  // [0, vocab). Only count() reads it, so the CUDA forward queues its kernel and returns without
  // waiting for the device.
  Tensor tally;
  int64_t vocab = 0;
  // The rows that count; throws if a target was outside [0, vocab) (a device-to-host copy on CUDA).
  int64_t count() const;
};

CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab,
                                         int32_t ignore_index);
Tensor cross_entropy_backward(const CrossEntropySaved& s, double dloss);
// Mean loss as a scalar Var (shape (1,), dtype of the statistics).
Var cross_entropy(const Var& logits, const Tensor& targets, int64_t vocab, int32_t ignore_index = -1);

CrossEntropyResult cross_entropy_forward_cpu(const Tensor& logits, const Tensor& targets, int64_t vocab,
                                             int32_t ignore_index);
Tensor cross_entropy_backward_cpu(const CrossEntropySaved& s, double dloss);
#if HYBRID_CUDA
CrossEntropyResult cross_entropy_forward_cuda(const Tensor& logits, const Tensor& targets, int64_t vocab,
                                              int32_t ignore_index);
Tensor cross_entropy_backward_cuda(const CrossEntropySaved& s, double dloss);
#endif

}  // namespace hyb
