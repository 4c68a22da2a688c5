// AdamW with decoupled weight decay, exactly PyTorch's (config.md 6.3). Master weights, m and v are
// f32; t counts the updates applied, so a skipped step (non-finite gradient) leaves it unchanged.
//   theta -= lr_s wd theta + lr_s (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps),  lr_s = lr f(s) lr_mult
//   AdamW opt(params, {.lr = 3e-4});  ...  opt.step(schedule_factor);
#pragma once
#include <string>
#include <vector>

#include "autograd/var.h"

namespace hyb {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
};

// What a checkpoint holds: "<name>.exp_avg", "<name>.exp_avg_sq" of every parameter, and the count t.
struct AdamWState {
  std::vector<std::pair<std::string, Tensor>> tensors;
  int64_t t = 0;
};

struct OptimParam {
  std::string name;
  Var var;
  double weight_decay = 0;  // already resolved per parameter (decay set, param_groups)
  double lr_mult = 1;
};

class AdamW {
 public:
  AdamW(std::vector<OptimParam> params, AdamWHyper hyper);
  // One update with lr = hyper.lr * factor * lr_mult; parameters without a gradient are left alone.
  void step(double factor);
  int64_t steps() const { return t_; }
  const std::vector<OptimParam>& params() const { return params_; }

  AdamWState state() const;
  void load_state(const AdamWState& state, const std::string& source);
  void set_steps(int64_t t) { t_ = t; }

 private:
  std::vector<OptimParam> params_;
  std::vector<Tensor> m_, v_;
  AdamWHyper h_;
  int64_t t_ = 0;
};

// What every parameter of one step shares.
struct AdamWStep {
  double beta1, beta2, eps;
  double bias1, bias2;  // 1 - b^t
};

// One parameter's tensors (f32, contiguous, equal shapes) and its own lr and decay this step.
struct AdamWTarget {
  Tensor param, grad, m, v;
  double lr, weight_decay;
};

// Updates all targets: the CPU loops, CUDA does it in one launch.
void adamw_update(const std::vector<AdamWTarget>& targets, const AdamWStep& s);
// The state tensor named `name` (an error naming `source` when it is missing).
const Tensor& find_state_tensor(const AdamWState& state, const std::string& name, const std::string& source);

void adamw_update_cpu(const AdamWTarget& t, const AdamWStep& s);
#if HYBRID_CUDA
void adamw_update_multi_cuda(const std::vector<AdamWTarget>& targets, const AdamWStep& s);
#endif

}  // namespace hyb
