#include "eval/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace hyb {

int32_t sample_token(const std::vector<double>& logits, int64_t vocab, const SamplingOptions& opt, RngStream& rng) {
  HYB_CHECK(vocab >= 1 && vocab <= int64_t(logits.size()), "sample_token: vocab ", vocab, " outside [1, ", logits.size(), "]");
  HYB_CHECK(opt.temperature >= 0, "generate: --temperature must be >= 0, got ", opt.temperature);
  HYB_CHECK(opt.top_k >= 0, "generate: --top-k must be >= 0, got ", opt.top_k);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  // Highest logits first, ties to the lowest id: the order every rule below reads.
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  if (opt.temperature == 0) return ids[0];
  const size_t k = opt.top_k > 0 ? size_t(std::min<int64_t>(opt.top_k, vocab)) : size_t(vocab);
  std::vector<double> p(k);
  const double m = logits[size_t(ids[0])];
  double total = 0;
  for (size_t i = 0; i < k; ++i) total += p[i] = std::exp((logits[size_t(ids[i])] - m) / opt.temperature);
  double u = double(rng.uniform()) * total;
  for (size_t i = 0; i < k; ++i) {
    u -= p[i];
    if (u < 0) return ids[i];
  }
  return ids[k - 1];
}

}  // namespace hyb
