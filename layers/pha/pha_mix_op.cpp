#include "layers/pha/pha_mix_op.h"

#include <cmath>

namespace hyb {

namespace {

void check_mix_inputs(const std::vector<Tensor>& n, const Tensor& p) {
  HYB_CHECK(!n.empty() && int(n.size()) <= kPhaMaxBranches, "pha_mix: expected 1 to ", kPhaMaxBranches,
            " branches, got ", n.size());
  HYB_CHECK(p.dim() == 1 && p.size(0) == int64_t(n.size()), "pha_mix: logits are ", shape_str(p.shape()), " for ",
            n.size(), " branches; expected (", n.size(), ",)");
  for (size_t i = 1; i < n.size(); ++i) {
    check_same_shape("pha_mix", n[0], n[i], "branch 0", "another branch");
    HYB_CHECK(n[i].dtype() == n[0].dtype(), "pha_mix: branch ", i, " is ", dtype_name(n[i].dtype()), ", branch 0 is ",
              dtype_name(n[0].dtype()));
    check_same_device("pha_mix", n[0], n[i]);
  }
  check_same_device("pha_mix", n[0], p);
}

}  // namespace

std::vector<double> pha_mix_weights(const Tensor& p) {
  const Tensor h = p.to(Device::cpu()).to(DType::f64).contiguous();
  std::vector<double> w(size_t(h.numel()));
  double total = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double x = h.data<double>()[i];
    w[i] = std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
    total += w[i];
  }
  for (double& x : w) x /= total;
  return w;
}

Tensor pha_mix_forward(const std::vector<Tensor>& n, const Tensor& p, PhaMixSaved* saved) {
  check_mix_inputs(n, p);
  Tensor m;
#if HYBRID_CUDA
  if (n[0].is_cuda()) m = pha_mix_forward_cuda(n, p);
#endif
  if (!m.defined()) m = pha_mix_forward_cpu(n, p);
  if (saved) *saved = {n, p};
  return m;
}

PhaMixGrads pha_mix_backward(const PhaMixSaved& s, const Tensor& dm, GradMask needed) {
  check_same_shape("pha_mix_backward", s.n[0], dm, "branch", "dm");
#if HYBRID_CUDA
  if (dm.is_cuda()) return pha_mix_backward_cuda(s, dm, needed);
#endif
  return pha_mix_backward_cpu(s, dm, needed);
}

Var pha_mix(const std::vector<Var>& n, const Var& p) {
  std::vector<Var> inputs = n;
  inputs.push_back(p);
  const bool rec = will_record(inputs);
  std::vector<Tensor> nt;
  for (const Var& v : n) nt.push_back(v.data());
  PhaMixSaved s;
  Tensor m = pha_mix_forward(nt, p.data(), rec ? &s : nullptr);
  return record_op1("pha_mix", inputs, m, [s](const Tensor& dm, GradMask need) {
    PhaMixGrads g = pha_mix_backward(s, dm, need);
    Grads out = g.dn;
    out.push_back(g.dp);
    return out;
  });
}

}  // namespace hyb
