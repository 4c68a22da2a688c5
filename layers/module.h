// Module: owns named parameters and named children, registered in the constructor. A parameter's
// full name is the dotted path from the model root (model.layers.3.mixer.q_proj.weight,
// specs/config.md 3.9). Parameters are f32 master weights; a module computing in bf16 reads them
// through compute_view(), a cast op whose backward returns an f32 gradient.
// Initial values come from each parameter's own Philox stream keyed by (seed, full name), so they
// do not depend on construction order (config.md 3.8). Parameters are allocated once, on the
// device of the enclosing ParameterScope, and only ever updated in place afterwards
// (optimizer steps, checkpoint loads), so every copy of a parameter's Var stays valid.
//   class Mlp : public Module {
//     Mlp() { up_ = register_module("up_proj", std::make_unique<Linear>(64, 256, false, ParamInit::normal(0.02))); }
//   };
//   model.initialize(seed);  for (auto& [name, p] : model.named_parameters()) ...
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tape.h"

namespace hyb {

struct ParamInit {
  enum class Kind { normal, constant, uniform, custom };
  Kind kind = Kind::normal;
  double a = 0, b = 0;  // normal: std, mean; constant: value; uniform: lo, hi
  std::function<void(const Tensor& t, uint64_t seed, const std::string& full_name)> fn;

  static ParamInit normal(double std, double mean = 0.0) { return {Kind::normal, std, mean, {}}; }
  static ParamInit constant(double v) { return {Kind::constant, v, 0, {}}; }
  static ParamInit uniform(double lo, double hi) { return {Kind::uniform, lo, hi, {}}; }
  static ParamInit custom(std::function<void(const Tensor&, uint64_t, const std::string&)> f) {
    return {Kind::custom, 0, 0, std::move(f)};
  }
};

struct Parameter {
  std::string name;  // relative to the module that registered it
  Var var;
  ParamInit init;
  bool decay;  // in the default weight-decay set (config.md 6.3): >= 2 dims unless the family says otherwise
};

// A parameter seen from the root: full dotted name plus the module's record.
struct NamedParameter {
  std::string name;
  Var var;
  bool decay;
};

// Parameters registered while this scope is alive are allocated on `device` with `dtype` (default:
// cpu, f32; tests build f64 modules to check gradients by finite differences).
class ParameterScope {
 public:
  explicit ParameterScope(Device device, DType dtype = DType::f32);
  ~ParameterScope();
  ParameterScope(const ParameterScope&) = delete;
  ParameterScope& operator=(const ParameterScope&) = delete;

 private:
  Device prev_device_;
  DType prev_dtype_;
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  std::vector<NamedParameter> named_parameters(const std::string& prefix = "") const;
  int64_t num_parameters() const;
  void initialize(uint64_t seed, const std::string& prefix = "");
  // Replaces the initial-value rule of every parameter below this module for which `pick` returns
  // one (names relative to this module): a family that owns its block sets the rules of the modules
  // it is built from (pha.md 8: Xavier-normal Linear weights, DeepNorm's beta on some of them).
  using InitPick =
      std::function<std::optional<ParamInit>(const std::string& name, const Shape& shape, const ParamInit& current)>;
  void override_init(const InitPick& pick, const std::string& prefix = "");
  void set_training(bool on);
  bool training() const { return training_; }

 protected:
  Var register_parameter(const std::string& name, const Shape& shape, ParamInit init);
  Var register_parameter(const std::string& name, const Shape& shape, ParamInit init, bool decay);
  template <typename M>
  M* register_module(const std::string& name, std::unique_ptr<M> m) {
    M* raw = m.get();
    children_.emplace_back(name, std::move(m));
    return raw;
  }
  // The parameter as an input of a computation in `dtype`: itself, or a differentiable cast.
  static Var compute_view(const Var& param, DType dtype);

 private:
  std::vector<Parameter> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  bool training_ = true;
};

// Children named "0", "1", ... (model.layers.{i}).
class ModuleList : public Module {
 public:
  template <typename M>
  M* add(const std::string& name, std::unique_ptr<M> m) {
    return register_module(name, std::move(m));
  }
};

}  // namespace hyb
