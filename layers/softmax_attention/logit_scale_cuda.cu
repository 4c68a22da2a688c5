// CUDA logit scale (logit_scale_op.h): Hq values, one thread each. A kernel rather than a host round
// trip so the step never synchronises here.
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "layers/softmax_attention/attention_cuda.h"

namespace hyb {
namespace {

__global__ void logit_scale_forward_kernel(const float* theta, float* tau, int n, float log_max) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) tau[i] = expf(fminf(theta[i], log_max));
}

__global__ void logit_scale_backward_kernel(const float* theta, const float* tau, const float* dtau, float* dtheta, int n,
                                            float log_max) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dtheta[i] = theta[i] <= log_max ? dtau[i] * tau[i] : 0.f;
}

void check_f32(const Tensor& t, const char* name) {
  HYB_CHECK(t.dtype() == DType::f32 && t.is_contiguous(), "logit_scale (cuda): ", name, " must be contiguous f32, got ", t.str());
}

}  // namespace

Tensor logit_scale_forward_cuda(const Tensor& theta, double max_scale) {
  check_f32(theta, "theta");
  Tensor tau = Tensor::empty(theta.shape(), DType::f32, theta.device());
  const int n = int(theta.numel()), dev = theta.device().index;
  logit_scale_forward_kernel<<<(n + 127) / 128, 128, 0, current_stream(dev)>>>(theta.data<float>(), tau.data<float>(), n,
                                                                              float(std::log(max_scale)));
  HYB_CUDA_LAUNCH_CHECK("logit_scale_forward_kernel", (n + 127) / 128, 128, 0);
  return tau;
}

Tensor logit_scale_backward_cuda(const Tensor& theta, const Tensor& tau, const Tensor& dtau0, double max_scale) {
  Tensor dtau = dtau0.to(DType::f32).contiguous();
  check_f32(theta, "theta");
  Tensor dtheta = Tensor::empty(theta.shape(), DType::f32, theta.device());
  const int n = int(theta.numel()), dev = theta.device().index;
  logit_scale_backward_kernel<<<(n + 127) / 128, 128, 0, current_stream(dev)>>>(
      theta.data<float>(), tau.data<float>(), dtau.data<float>(), dtheta.data<float>(), n, float(std::log(max_scale)));
  HYB_CUDA_LAUNCH_CHECK("logit_scale_backward_kernel", (n + 127) / 128, 128, 0);
  return dtheta;
}

}  // namespace hyb
