// The CUDA side of core's tensor functions; core/tensor.cpp and core/tensor_math.cpp call these under
// HYBRID_CUDA after their own checks. All work runs on the device's compute stream. Copies that end on
// the host return with the data there; copies from the host synchronise too, because pageable memory
// gives no other sign that the driver has finished reading it.
//   cuda_copy(gpu_view, cpu_tensor);    // any strides, any dtype pair among f32 f64 bf16 i32 i64 u16
//   std::vector<double> ss = cuda_sum_squares_each(grads); // fp32 per-block partials, summed in fp64,
//                                                          // one copy to the host for the whole list
#pragma once
#include <vector>

#include "core/tensor.h"

namespace hyb {

void cuda_copy(const Tensor& dst, const Tensor& src);  // same shape; at least one side on a cuda device
void cuda_fill(const Tensor& t, double value);          // any strides
void cuda_add_(const Tensor& dst, const Tensor& src, double alpha);  // contiguous; dst += alpha * src in fp64
void cuda_scale_(const Tensor& t, double s);                          // contiguous; t *= s in fp64
std::vector<double> cuda_sum_squares_each(const std::vector<Tensor>& ts);  // contiguous, one device

}  // namespace hyb
