#include "parity.h"

#include "autograd/gradcheck.h"
#include "compare.h"

namespace hyb {

namespace {

struct RunResult {
  std::vector<Tensor> outputs, grads;
};

RunResult run(const ParityFn& fn, const std::vector<Tensor>& inputs, DType dtype, Device device,
              const std::vector<Tensor>& douts_f64) {
  std::vector<Var> vars;
  for (const Tensor& t : inputs) {
    const bool fl = is_floating(t.dtype());
    vars.emplace_back(fl ? t.to(dtype).to(device) : t.to(device), fl);
  }
  std::vector<Var> outs = fn(vars);
  std::vector<Var> roots;
  std::vector<Tensor> droots;
  for (size_t k = 0; k < outs.size(); ++k)
    if (outs[k].requires_grad()) {
      roots.push_back(outs[k]);
      droots.push_back(douts_f64[k].to(outs[k].dtype()).to(outs[k].device()));
    }
  RunResult r;
  for (const Var& o : outs) r.outputs.push_back(o.data().to(Device::cpu()).to(DType::f64));
  if (!roots.empty()) backward(roots, droots);
  for (const Var& v : vars) r.grads.push_back(v.grad().defined() ? v.grad().to(Device::cpu()).to(DType::f64) : Tensor());
  return r;
}

}  // namespace

ParityResult cuda_parity(const ParityFn& fn, const std::vector<Tensor>& inputs64, const ParityOptions& opt) {
  std::vector<Tensor> inputs;
  for (const Tensor& t : inputs64) inputs.push_back(is_floating(t.dtype()) ? t.to(DType::f64) : t);
  // The upstream gradients are drawn once from the reference outputs' shapes.
  std::vector<Tensor> douts;
  {
    NoGradGuard g;
    std::vector<Var> probe;
    for (const Tensor& t : inputs) probe.emplace_back(t);
    uint64_t k = 0;
    for (const Var& o : fn(probe)) douts.push_back(random_tensor(o.shape(), opt.seed + 100 + k++));
  }
  RunResult ref = run(fn, inputs, DType::f64, Device::cpu(), douts);
  ParityResult res;
  auto compare = [&](const char* dt, const std::string& what, const Tensor& got, const Tensor& want, double tol) {
    if (!want.defined()) return;
    if (!got.defined()) {
      res.ok = false;
      res.report += str_cat(dt, " ", what, ": missing on cuda\n");
      return;
    }
    const double e = rel_error(got, want);
    const bool pass = e < tol;
    res.ok = res.ok && pass;
    res.report += str_cat(dt, " ", what, " ", shape_str(want.shape()), ": rel.err ", e, " (tol ", tol, ")", pass ? "" : "  FAIL", "\n");
  };
  for (auto [dtype, on, tol] : {std::tuple{DType::f32, opt.f32, opt.tol_f32}, std::tuple{DType::bf16, opt.bf16, opt.tol_bf16}}) {
    if (!on) continue;
    RunResult got = run(fn, inputs, dtype, Device::cuda(0), douts);
    for (size_t k = 0; k < ref.outputs.size(); ++k) compare(dtype_name(dtype), str_cat("output ", k), got.outputs[k], ref.outputs[k], tol);
    for (size_t i = 0; i < ref.grads.size(); ++i) compare(dtype_name(dtype), str_cat("grad of input ", i), got.grads[i], ref.grads[i], tol);
  }
  return res;
}

}  // namespace hyb
