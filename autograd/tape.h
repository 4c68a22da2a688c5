// The tape: ops append nodes in execution order; backward() walks them in reverse, once.
// A node keeps the grad cells of its inputs and outputs (never their data) and a backward
// closure that owns exactly what the op saved. Walking the tape frees each node as it runs.
//   Var y = record_op("silu", {x}, {y_data}, [saved = x.data()](const Grads& dy, GradMask need) {
//     return Grads{silu_backward(saved, dy[0])};
//   })[0];
// One tape per thread, so the thread-based communicator's ranks each have their own.
#pragma once
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "autograd/var.h"

namespace hyb {

using Grads = std::vector<Tensor>;

// Which inputs of a node need a gradient; backward skips the others.
struct GradMask {
  uint64_t bits = 0;
  bool operator[](size_t i) const { return (bits >> i) & 1u; }
  bool any() const { return bits != 0; }
};

using BackwardFn = std::function<Grads(const Grads& douts, GradMask needed)>;

struct Node {
  const char* op = "";
  std::string module;                               // module path at record time, for messages
  std::vector<std::shared_ptr<GradCell>> inputs;    // null where the input needs no gradient
  std::vector<Shape> input_shapes;
  std::vector<std::shared_ptr<GradCell>> outputs;
  BackwardFn backward;
  struct Watched {
    const char* name;
    Tensor tensor;
    uint64_t version;
  };
  std::vector<Watched> watched;  // saved tensors whose in-place modification is an error
};

bool grad_enabled();

// Disables recording (evaluation, optimizer steps, decoding) for its scope.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Pushes a module name ("layers.3", "mixer") onto the path recorded in nodes.
class ModuleScope {
 public:
  explicit ModuleScope(const std::string& name);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;
};
std::string current_module_path();

// Records an op whose outputs are already computed. Returns the outputs as Vars (with grad cells
// when any input requires grad and recording is on). `watch` lists saved inputs to version-check.
std::vector<Var> record_op(const char* op, const std::vector<Var>& inputs, std::vector<Tensor> outputs,
                           BackwardFn backward, std::initializer_list<std::pair<const char*, Tensor>> watch = {});
// One output, backward receives its single gradient.
Var record_op1(const char* op, const std::vector<Var>& inputs, Tensor output,
               std::function<Grads(const Tensor& dout, GradMask needed)> backward,
               std::initializer_list<std::pair<const char*, Tensor>> watch = {});

// True when an op on these inputs will be recorded.
bool will_record(const std::vector<Var>& inputs);

// Runs the tape backward from roots seeded with droots (default: ones for a scalar root).
void backward(const Var& root, Tensor droot = {});
void backward(const std::vector<Var>& roots, const std::vector<Tensor>& droots);

// Drops every recorded node (a forward whose backward will not run).
void clear_tape();
size_t tape_size();

// Called once per leaf whose gradient is complete during backward (data-parallel buckets).
using GradReadyHook = std::function<void(GradCell&)>;
void set_grad_ready_hook(GradReadyHook hook);

}  // namespace hyb
