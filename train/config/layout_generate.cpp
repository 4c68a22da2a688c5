// The floors of 2.2 are taken in integers, (k - 1/2)·L/n as (2k - 1)·L / 2n: every operand is
// non-negative, so integer division floors and the layers are exact for any L and n.
#include "train/config/layout_generate.h"

#include "core/config_error.h"

namespace hyb {

namespace {

std::vector<int64_t> middle(int64_t L, int64_t n) {
  std::vector<int64_t> p;
  for (int64_t k = 1; k <= n; ++k) p.push_back((2 * k - 1) * L / (2 * n));
  return p;
}

std::vector<int64_t> every(int64_t L, int64_t P) {
  std::vector<int64_t> p;
  for (int64_t i = P - 1; i < L; i += P) p.push_back(i);
  if (p.empty() || p.back() != L - 1) p.push_back(L - 1);
  return p;
}

std::vector<int64_t> sandwich(int64_t L, int64_t n) {
  std::vector<int64_t> p{0};
  for (int64_t k = 2; k <= n - 1; ++k) p.push_back(1 + (2 * k - 3) * (L - 2) / (2 * (n - 2)));
  p.push_back(L - 1);
  return p;
}

}  // namespace

std::vector<int64_t> special_layers(const LayoutRule& r) {
  const int64_t L = r.n_layers;
  HYB_ASSERT(L >= 1, "special_layers: n_layers ", L);
  const std::string rule = str_cat("placement \"", r.placement, "\"");
  if (r.placement == "every") {
    HYB_ASSERT(r.period && *r.period >= 1, "special_layers: every without a period");
    std::vector<int64_t> p = every(L, *r.period);
    if (r.n_special && *r.n_special != int64_t(p.size()))
      throw ConfigKeyError("n_special", expected_problem(str_cat(p.size(), " (the layers period ", *r.period, " picks among ", L, ")"),
                                                         Json(*r.n_special)));
    return p;
  }
  if (!r.n_special) throw ConfigKeyError("n_special", missing_key_problem(str_cat(rule, " needs it; only \"every\" derives it")));
  const int64_t n = *r.n_special;
  HYB_ASSERT(n >= 1, "special_layers: n_special ", n);
  if (n > L) throw ConfigKeyError("n_special", expected_problem(str_cat("at most n_layers (", L, ")"), Json(n)));
  if (r.placement == "middle" || r.placement == "scatter") return middle(L, n);
  if (r.placement == "front" || r.placement == "end") {
    std::vector<int64_t> p = middle(L, n);
    if (r.placement == "front") p.front() = 0;
    else p.back() = L - 1;
    return p;
  }
  if (r.placement == "position") {
    HYB_ASSERT(r.position && *r.position >= 0, "special_layers: position without a position");
    if (n != 1) throw ConfigKeyError("n_special", expected_problem(str_cat("1 with ", rule), Json(n)));
    if (*r.position >= L)
      throw ConfigKeyError("position", expected_problem(str_cat("a layer index below n_layers (", L, ")"), Json(*r.position)));
    return {*r.position};
  }
  if (r.placement == "cluster") {
    std::vector<int64_t> p;
    for (int64_t k = 0; k < n; ++k) p.push_back((L - n) / 2 + k);
    return p;
  }
  HYB_ASSERT(r.placement == "sandwich", "special_layers: unknown placement ", r.placement);
  if (n < 2) throw ConfigKeyError("n_special", expected_problem(str_cat("at least 2 with ", rule), Json(n)));
  return sandwich(L, n);
}

std::vector<std::string> place_codes(int64_t n_layers, const std::vector<int64_t>& layers, const std::string& base,
                                     const std::string& special) {
  std::vector<std::string> codes(size_t(n_layers), base);
  std::vector<bool> taken(size_t(n_layers), false);
  for (int64_t i : layers) {
    if (i < 0 || i >= n_layers || taken[size_t(i)])
      throw ConfigKeyError("placement", expected_problem(str_cat("distinct layer indices below n_layers (", n_layers, ")"),
                                                         Json(layers)));
    taken[size_t(i)] = true;
    codes[size_t(i)] = special;
  }
  return codes;
}

}  // namespace hyb
