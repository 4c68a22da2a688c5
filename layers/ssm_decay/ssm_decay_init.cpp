// The decay parameters' initial values (ssm_decay_init.h), drawn from each parameter's own stream.
#include "layers/ssm_decay/ssm_decay_init.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"

namespace hyb {

namespace {

// u ~ U(0, 1) per element from the parameter's stream, mapped by f, written in the tensor's dtype.
template <typename F>
void fill_mapped_uniform(const Tensor& t, uint64_t seed, const std::string& name, F&& f) {
  Tensor u = Tensor::empty(t.shape(), DType::f64);
  fill_uniform(u, seed, name, 0.0, 1.0);
  double* p = u.data<double>();
  for (int64_t i = 0; i < u.numel(); ++i) p[i] = f(p[i]);
  t.copy_(u);
}

}  // namespace

ParamInit dt_bias_init(double dt_min, double dt_max, double dt_init_floor) {
  return ParamInit::custom([=](const Tensor& t, uint64_t seed, const std::string& name) {
    fill_mapped_uniform(t, seed, name, [&](double u) {
      const double dt0 = std::max(std::exp(u * (std::log(dt_max) - std::log(dt_min)) + std::log(dt_min)), dt_init_floor);
      return dt0 + std::log(-std::expm1(-dt0));
    });
  });
}

ParamInit a_log_init(double lo, double hi) {
  return ParamInit::custom([=](const Tensor& t, uint64_t seed, const std::string& name) {
    fill_mapped_uniform(t, seed, name, [&](double u) { return std::log(hi - (hi - lo) * u); });
  });
}

}  // namespace hyb
