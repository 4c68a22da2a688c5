#include "layers/module.h"

#include "autograd/ops/cast.h"
#include "core/rng.h"

namespace hyb {

namespace {
thread_local Device g_param_device = Device::cpu();
thread_local DType g_param_dtype = DType::f32;
}  // namespace

ParameterScope::ParameterScope(Device device, DType dtype) : prev_device_(g_param_device), prev_dtype_(g_param_dtype) {
  g_param_device = device;
  g_param_dtype = dtype;
}
ParameterScope::~ParameterScope() {
  g_param_device = prev_device_;
  g_param_dtype = prev_dtype_;
}

static std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

Var Module::register_parameter(const std::string& name, const Shape& shape, ParamInit init) {
  return register_parameter(name, shape, std::move(init), shape.size() >= 2);
}

Var Module::register_parameter(const std::string& name, const Shape& shape, ParamInit init, bool decay) {
  for (const Parameter& p : params_) HYB_ASSERT(p.name != name, "parameter ", name, " registered twice");
  Var v(Tensor::empty(shape, g_param_dtype, g_param_device), true, name);
  params_.push_back({name, v, std::move(init), decay});
  return v;
}

std::vector<NamedParameter> Module::named_parameters(const std::string& prefix) const {
  std::vector<NamedParameter> out;
  for (const Parameter& p : params_) out.push_back({join(prefix, p.name), p.var, p.decay});
  for (const auto& [name, child] : children_) {
    auto sub = child->named_parameters(join(prefix, name));
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : named_parameters()) n += p.var.numel();
  return n;
}

void Module::initialize(uint64_t seed, const std::string& prefix) {
  for (Parameter& p : params_) {
    const std::string full = join(prefix, p.name);
    p.var.cell()->name = full;
    const Tensor& t = p.var.data();
    switch (p.init.kind) {
      case ParamInit::Kind::normal: fill_normal(t, seed, full, p.init.b, p.init.a); break;
      case ParamInit::Kind::constant: t.fill_(p.init.a); break;
      case ParamInit::Kind::uniform: fill_uniform(t, seed, full, p.init.a, p.init.b); break;
      case ParamInit::Kind::custom: p.init.fn(t, seed, full); break;
    }
  }
  for (auto& [name, child] : children_) child->initialize(seed, join(prefix, name));
}

void Module::override_init(const InitPick& pick, const std::string& prefix) {
  for (Parameter& p : params_)
    if (std::optional<ParamInit> init = pick(join(prefix, p.name), p.var.data().shape(), p.init)) p.init = std::move(*init);
  for (auto& [name, child] : children_) child->override_init(pick, join(prefix, name));
}

void Module::set_training(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->set_training(on);
}

Var Module::compute_view(const Var& param, DType dtype) {
  if (param.dtype() == dtype) return param;
  return cast(param, dtype);
}

}  // namespace hyb
