#include "optim/adamw.h"

#include <cmath>

#include "core/parallel.h"

namespace hyb {

AdamW::AdamW(std::vector<OptimParam> params, AdamWHyper hyper) : params_(std::move(params)), h_(hyper) {
  for (const OptimParam& p : params_) {
    HYB_CHECK(p.var.dtype() == DType::f32, "AdamW: parameter ", p.name, " is ", dtype_name(p.var.dtype()),
              "; master weights must be f32");
    m_.push_back(Tensor::zeros(p.var.shape(), DType::f32, p.var.device()));
    v_.push_back(Tensor::zeros(p.var.shape(), DType::f32, p.var.device()));
  }
}

void AdamW::step(double factor) {
  ++t_;
  const AdamWStep s{h_.beta1, h_.beta2, h_.eps, 1 - std::pow(h_.beta1, double(t_)), 1 - std::pow(h_.beta2, double(t_))};
  std::vector<AdamWTarget> targets;
  for (size_t i = 0; i < params_.size(); ++i) {
    const OptimParam& p = params_[i];
    if (!p.var.grad().defined()) continue;
    targets.push_back({p.var.data(), p.var.grad(), m_[i], v_[i], h_.lr * factor * p.lr_mult, p.weight_decay});
  }
  adamw_update(targets, s);
}

AdamWState AdamW::state() const {
  AdamWState s;
  for (size_t i = 0; i < params_.size(); ++i) {
    s.tensors.emplace_back(params_[i].name + ".exp_avg", m_[i]);
    s.tensors.emplace_back(params_[i].name + ".exp_avg_sq", v_[i]);
  }
  s.t = t_;
  return s;
}

const Tensor& find_state_tensor(const AdamWState& state, const std::string& name, const std::string& source) {
  for (const auto& [n, tensor] : state.tensors)
    if (n == name) return tensor;
  throw Error(str_cat(source, ": optimizer state ", name, " is missing"));
}

void AdamW::load_state(const AdamWState& state, const std::string& source) {
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto [suffix, dst] : {std::pair{".exp_avg", m_[i]}, std::pair{".exp_avg_sq", v_[i]}}) {
      const Tensor& src = find_state_tensor(state, params_[i].name + suffix, source);
      HYB_CHECK(src.shape() == dst.shape(), source, ": ", params_[i].name, suffix, " is ", shape_str(src.shape()),
                ", model expects ", shape_str(dst.shape()));
      dst.copy_(src);
    }
  }
  t_ = state.t;
}

void adamw_update(const std::vector<AdamWTarget>& targets, const AdamWStep& s) {
  for (const AdamWTarget& t : targets) {
    HYB_ASSERT(t.param.is_contiguous() && t.grad.is_contiguous() && t.param.numel() == t.grad.numel());
    HYB_CHECK(t.grad.dtype() == DType::f32, "AdamW: gradients must be f32, got ", dtype_name(t.grad.dtype()));
  }
#if HYBRID_CUDA
  if (!targets.empty() && targets[0].param.is_cuda()) return adamw_update_multi_cuda(targets, s);
#endif
  for (const AdamWTarget& t : targets) adamw_update_cpu(t, s);
}

void adamw_update_cpu(const AdamWTarget& t, const AdamWStep& s) {
  t.param.bump_version();
  float* p = t.param.data<float>();
  const float* g = t.grad.data<float>();
  float* mp = t.m.data<float>();
  float* vp = t.v.data<float>();
  const float b1 = float(s.beta1), b2 = float(s.beta2), lr = float(t.lr), wd = float(t.weight_decay);
  const float inv_b1 = float(1.0 / s.bias1), inv_sqrt_b2 = float(1.0 / std::sqrt(s.bias2)), eps = float(s.eps);
  parallel_for(t.param.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      mp[i] = b1 * mp[i] + (1 - b1) * g[i];
      vp[i] = b2 * vp[i] + (1 - b2) * g[i] * g[i];
      const float denom = std::sqrt(vp[i]) * inv_sqrt_b2 + eps;
      p[i] = p[i] - lr * wd * p[i] - lr * (mp[i] * inv_b1) / denom;
    }
  });
}

}  // namespace hyb
