#include "layers/module.h"

#include "core/rng.h"

namespace hyb {

namespace {
thread_local Device g_param_device = Device::cpu();
}  // namespace

ParameterDeviceScope::ParameterDeviceScope(Device device) : prev_(g_param_device) { g_param_device = device; }
ParameterDeviceScope::~ParameterDeviceScope() { g_param_device = prev_; }

static std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

Var Module::register_parameter(const std::string& name, const Shape& shape, ParamInit init) {
  return register_parameter(name, shape, std::move(init), shape.size() >= 2);
}

Var Module::register_parameter(const std::string& name, const Shape& shape, ParamInit init, bool decay) {
  for (const Parameter& p : params_) HYB_ASSERT(p.name != name, "parameter ", name, " registered twice");
  Var v(Tensor::empty(shape, DType::f32, g_param_device), true, name);
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

void Module::set_training(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->set_training(on);
}

Var Module::compute_view(const Var& param, DType dtype) {
  HYB_CHECK(param.dtype() == dtype, "compute_view: parameter ", param.name(), " is ", dtype_name(param.dtype()),
            " but the computation is ", dtype_name(dtype));
  return param;
}

}  // namespace hyb
