#include "autograd/gradcheck.h"

#include <cmath>

#include "core/rng.h"

namespace hyb {

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype, double std, double mean) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_normal(t, seed, "test.random_tensor", mean, std);
  return t;
}

namespace {

double weighted_sum(const std::vector<Var>& outs, const std::vector<Tensor>& weights) {
  double total = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!weights[k].defined()) continue;
    std::vector<double> o = outs[k].data().to_double_vector(), w = weights[k].to_double_vector();
    for (size_t i = 0; i < o.size(); ++i) total += o[i] * w[i];
  }
  return total;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  std::vector<bool> check = opt.check;
  if (check.empty())
    for (const Tensor& t : inputs) check.push_back(is_floating(t.dtype()));
  HYB_CHECK(check.size() == inputs.size(), "gradcheck: ", check.size(), " check flags for ", inputs.size(), " inputs");

  std::vector<Var> vars;
  for (size_t i = 0; i < inputs.size(); ++i) {
    HYB_CHECK(!check[i] || inputs[i].dtype() == DType::f64, "gradcheck: input ", i, " must be f64, got ",
              dtype_name(inputs[i].dtype()));
    vars.emplace_back(inputs[i].clone(), bool(check[i]));
  }
  std::vector<Var> outs = fn(vars);
  std::vector<Tensor> weights;
  std::vector<Var> roots;
  std::vector<Tensor> droots;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].requires_grad() || !is_floating(outs[k].dtype())) {
      weights.emplace_back();
      continue;
    }
    weights.push_back(random_tensor(outs[k].shape(), opt.seed + k, outs[k].dtype()));
    roots.push_back(outs[k]);
    droots.push_back(weights.back());
  }
  HYB_CHECK(!roots.empty(), "gradcheck: no output depends on a checked input");
  backward(roots, droots);

  GradcheckResult res;
  res.error.assign(inputs.size(), 0.0);
  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!check[i]) continue;
    std::vector<double> ana = vars[i].grad().defined() ? vars[i].grad().to_double_vector()
                                                       : std::vector<double>(size_t(inputs[i].numel()), 0.0);
    std::vector<double> num(ana.size());
    Tensor x = vars[i].data().contiguous();
    double* p = x.data<double>();
    std::vector<Var> probe = vars;
    probe[i] = Var(x);
    for (size_t e = 0; e < num.size(); ++e) {
      const double orig = p[e];
      p[e] = orig + opt.eps;
      double fp = weighted_sum(fn(probe), weights);
      p[e] = orig - opt.eps;
      double fm = weighted_sum(fn(probe), weights);
      p[e] = orig;
      num[e] = (fp - fm) / (2 * opt.eps);
    }
    double dn = 0, nn = 0, na = 0;
    for (size_t e = 0; e < num.size(); ++e) {
      dn += (num[e] - ana[e]) * (num[e] - ana[e]);
      nn += num[e] * num[e];
      na += ana[e] * ana[e];
    }
    double denom = std::sqrt(std::max(nn, na));
    res.error[i] = denom < 1e-9 ? std::sqrt(dn) : std::sqrt(dn) / denom;
    res.max_error = std::max(res.max_error, res.error[i]);
    res.report += str_cat("input ", i, " ", shape_str(inputs[i].shape()), ": |num| ", std::sqrt(nn), " |ana| ",
                          std::sqrt(na), " rel.err ", res.error[i], "\n");
  }
  return res;
}

}  // namespace hyb
