// CUDA side of sum/mean (reduce.h): same contract as sum_forward_cpu (dims wrapped and sorted,
// result in the keepdim shape, multiplied by scale). The backward is a broadcast copy and needs no
// kernel of its own. Included only under HYBRID_CUDA; the kernel goes in reduce_cuda.cu.
#pragma once
#include "autograd/ops/reduce.h"

namespace hyb {

Tensor sum_forward_cuda(const Tensor& x, const std::vector<int64_t>& dims, double scale);

}  // namespace hyb
