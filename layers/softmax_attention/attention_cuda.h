// CUDA side of the softmax-attention family: same contracts as the CPU references in
// attention_op.h and logit_scale_op.h (attention.md 4 for the algorithm). Only the dispatchers in
// attention_op.cpp and logit_scale_op.cpp call these, and only under HYBRID_CUDA.
#pragma once
#include "layers/softmax_attention/attention_op.h"

namespace hyb {

AttentionOutputs attention_forward_cuda(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const AttentionParams& p);
AttentionGrads attention_backward_cuda(const AttentionSaved& s, const Tensor& dout, const Tensor& dlse,
                                       GradMask needed);

Tensor logit_scale_forward_cuda(const Tensor& theta, double max_scale);
Tensor logit_scale_backward_cuda(const Tensor& theta, const Tensor& tau, const Tensor& dtau, double max_scale);

}  // namespace hyb
