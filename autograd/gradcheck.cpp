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

GradcheckResult gradcheck_leaves(const std::function<std::vector<Var>()>& fn, const std::vector<Var>& leaves,
                                 const std::vector<std::string>& names, const GradcheckOptions& opt) {
  for (size_t i = 0; i < leaves.size(); ++i) {
    HYB_CHECK(leaves[i].requires_grad() && leaves[i].dtype() == DType::f64 && leaves[i].data().is_contiguous(),
              "gradcheck: leaf ", names[i], " must be a contiguous f64 Var that requires grad, got ", leaves[i].data().str());
    leaves[i].cell()->grad = Tensor();
  }
  std::vector<Var> outs = fn();
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
  res.error.assign(leaves.size(), 0.0);
  NoGradGuard no_grad;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Tensor& x = leaves[i].data();
    std::vector<double> ana = leaves[i].grad().defined() ? leaves[i].grad().to_double_vector()
                                                         : std::vector<double>(size_t(x.numel()), 0.0);
    std::vector<double> num(ana.size());
    double* p = x.data<double>();
    for (size_t e = 0; e < num.size(); ++e) {
      const double orig = p[e];
      p[e] = orig + opt.eps;
      const double fp = weighted_sum(fn(), weights);
      p[e] = orig - opt.eps;
      const double fm = weighted_sum(fn(), weights);
      p[e] = orig;
      num[e] = (fp - fm) / (2 * opt.eps);
    }
    double dn = 0, nn = 0, na = 0;
    for (size_t e = 0; e < num.size(); ++e) {
      dn += (num[e] - ana[e]) * (num[e] - ana[e]);
      nn += num[e] * num[e];
      na += ana[e] * ana[e];
    }
    const double denom = std::sqrt(std::max(nn, na));
    res.error[i] = denom < 1e-9 ? std::sqrt(dn) : std::sqrt(dn) / denom;
    res.max_error = std::max(res.max_error, res.error[i]);
    res.report += str_cat(names[i], " ", shape_str(x.shape()), ": |num| ", std::sqrt(nn), " |ana| ", std::sqrt(na),
                          " rel.err ", res.error[i], "\n");
  }
  return res;
}

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  std::vector<bool> check = opt.check;
  if (check.empty())
    for (const Tensor& t : inputs) check.push_back(is_floating(t.dtype()));
  HYB_CHECK(check.size() == inputs.size(), "gradcheck: ", check.size(), " check flags for ", inputs.size(), " inputs");
  std::vector<Var> vars, leaves;
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    HYB_CHECK(!check[i] || inputs[i].dtype() == DType::f64, "gradcheck: input ", i, " must be f64, got ",
              dtype_name(inputs[i].dtype()));
    vars.emplace_back(inputs[i].contiguous().clone(), bool(check[i]));
    if (check[i]) {
      leaves.push_back(vars.back());
      names.push_back(str_cat("input ", i));
    }
  }
  GradcheckResult sub = gradcheck_leaves([&] { return fn(vars); }, leaves, names, opt);
  GradcheckResult res;
  res.report = sub.report;
  res.max_error = sub.max_error;
  res.error.assign(inputs.size(), 0.0);
  for (size_t i = 0, j = 0; i < inputs.size(); ++i)
    if (check[i]) res.error[i] = sub.error[j++];
  return res;
}

}  // namespace hyb
