#include "autograd/tape.h"

#include <unordered_map>

#include "core/tensor_math.h"

namespace hyb {
namespace {

struct TapeState {
  std::vector<Node> nodes;
  bool grad_enabled = true;
  std::vector<std::string> module_stack;
  GradReadyHook ready_hook;
};

TapeState& state() {
  thread_local TapeState s;
  return s;
}

void accumulate(GradCell& cell, const Tensor& g, const Node& node, size_t input_index, const Shape& want) {
  HYB_CHECK(g.shape() == want, "backward of ", node.op, node.module.empty() ? "" : " in ", node.module,
            ": gradient of input ", input_index, " is ", shape_str(g.shape()), " but the input is ", shape_str(want));
  if (!cell.grad.defined()) {
    // A leaf's grad is added into in place later, and backward functions may return views of
    // their douts or saved tensors: a leaf gets its own buffer. A non-leaf grad is only read.
    cell.grad = cell.leaf ? g.clone() : g.contiguous();
    return;
  }
  if (cell.leaf) {
    add_(cell.grad, g.contiguous());
  } else {
    Tensor sum = cell.grad.clone();
    add_(sum, g.contiguous());
    cell.grad = sum;
  }
}

void accumulate_root(GradCell& cell, const Tensor& g) {
  if (cell.grad.defined()) {
    add_(cell.grad, g.contiguous());
  } else {
    cell.grad = g.clone();
  }
}

}  // namespace

bool grad_enabled() { return state().grad_enabled; }

NoGradGuard::NoGradGuard() : prev_(state().grad_enabled) { state().grad_enabled = false; }
NoGradGuard::~NoGradGuard() { state().grad_enabled = prev_; }

ModuleScope::ModuleScope(const std::string& name) { state().module_stack.push_back(name); }
ModuleScope::~ModuleScope() { state().module_stack.pop_back(); }

std::string current_module_path() {
  std::string p;
  for (const auto& s : state().module_stack) p += (p.empty() ? "" : ".") + s;
  return p;
}

bool will_record(const std::vector<Var>& inputs) {
  if (!state().grad_enabled) return false;
  for (const Var& v : inputs)
    if (v.requires_grad()) return true;
  return false;
}

std::vector<Var> record_op(const char* op, const std::vector<Var>& inputs, std::vector<Tensor> outputs,
                           BackwardFn backward, std::initializer_list<std::pair<const char*, Tensor>> watch) {
  std::vector<Var> result;
  result.reserve(outputs.size());
  if (!will_record(inputs)) {
    for (Tensor& t : outputs) result.emplace_back(std::move(t));
    return result;
  }
  HYB_ASSERT(inputs.size() <= 64, "an op may have at most 64 inputs");
  Node node;
  node.op = op;
  node.module = current_module_path();
  for (const Var& v : inputs) {
    node.inputs.push_back(v.requires_grad() ? v.cell() : nullptr);
    node.input_shapes.push_back(v.shape());
  }
  for (Tensor& t : outputs) {
    auto cell = std::make_shared<GradCell>();
    cell->requires_grad = true;
    cell->leaf = false;
    node.outputs.push_back(cell);
    result.emplace_back(std::move(t), cell);
  }
  for (const auto& [name, t] : watch) node.watched.push_back({name, t, t.version()});
  node.backward = std::move(backward);
  state().nodes.push_back(std::move(node));
  return result;
}

Var record_op1(const char* op, const std::vector<Var>& inputs, Tensor output,
               std::function<Grads(const Tensor& dout, GradMask needed)> backward,
               std::initializer_list<std::pair<const char*, Tensor>> watch) {
  return record_op(
             op, inputs, {std::move(output)},
             [fn = std::move(backward)](const Grads& douts, GradMask needed) { return fn(douts[0], needed); }, watch)[0];
}

void backward(const Var& root, Tensor droot) {
  if (!droot.defined()) {
    HYB_CHECK(root.numel() == 1, "backward: the root has shape ", shape_str(root.shape()),
              "; give its gradient explicitly or reduce it to a scalar");
    droot = Tensor::full(root.shape(), 1.0, root.dtype(), root.device());
  }
  backward(std::vector<Var>{root}, std::vector<Tensor>{droot});
}

void backward(const std::vector<Var>& roots, const std::vector<Tensor>& droots) {
  HYB_CHECK(roots.size() == droots.size(), "backward: ", roots.size(), " roots but ", droots.size(), " gradients");
  TapeState& s = state();
  for (size_t i = 0; i < roots.size(); ++i) {
    HYB_CHECK(roots[i].requires_grad(), "backward: root ", i, " does not require grad (no input of it does, or it was computed under NoGradGuard)");
    check_same_shape("backward", roots[i].data(), droots[i], "root", "its gradient");
    GradCell& c = *roots[i].cell();
    if (c.leaf) {
      accumulate_root(c, droots[i]);
    } else {
      c.grad = droots[i];
    }
  }
  // Leaves still waiting for contributions, so a hook fires the moment a gradient is complete.
  std::unordered_map<GradCell*, int> pending;
  if (s.ready_hook)
    for (const Node& n : s.nodes)
      for (const auto& c : n.inputs)
        if (c && c->leaf) ++pending[c.get()];

  const GradMask none{};
  while (!s.nodes.empty()) {
    Node node = std::move(s.nodes.back());
    s.nodes.pop_back();
    Grads douts(node.outputs.size());
    bool any = false;
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      douts[i] = std::move(node.outputs[i]->grad);
      node.outputs[i]->grad = Tensor();
      any = any || douts[i].defined();
    }
    GradMask mask = none;
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i]) mask.bits |= uint64_t(1) << i;
    if (any && mask.any()) {
      for (const auto& w : node.watched)
        HYB_CHECK(w.tensor.version() == w.version, "backward of ", node.op,
                  node.module.empty() ? "" : " in " + node.module, ": saved tensor ", w.name, " ",
                  shape_str(w.tensor.shape()), " was modified in place after the forward (version ", w.version,
                  " then ", w.tensor.version(), ")");
      Grads gin = node.backward(douts, mask);
      HYB_ASSERT(gin.size() == node.inputs.size(), node.op, " backward returned ", gin.size(), " gradients for ",
                 node.inputs.size(), " inputs");
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (node.inputs[i] && gin[i].defined()) accumulate(*node.inputs[i], gin[i], node, i, node.input_shapes[i]);
    }
    if (s.ready_hook)
      for (const auto& c : node.inputs)
        if (c && c->leaf && --pending[c.get()] == 0) s.ready_hook(*c);
  }
}

void clear_tape() { state().nodes.clear(); }
size_t tape_size() { return state().nodes.size(); }
void set_grad_ready_hook(GradReadyHook hook) { state().ready_hook = std::move(hook); }

}  // namespace hyb
