#include "eval/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/tape.h"
#include "core/error.h"

namespace hyb {

int32_t sample_token(const std::vector<double>& logits, int64_t vocab, const SamplingOptions& opt, RngStream& rng) {
  HYB_CHECK(vocab >= 1 && vocab <= int64_t(logits.size()), "sample_token: vocab ", vocab, " outside [1, ", logits.size(), "]");
  HYB_CHECK(opt.temperature >= 0, "generate: --temperature must be >= 0, got ", opt.temperature);
  HYB_CHECK(opt.top_k >= 0, "generate: --top-k must be >= 0, got ", opt.top_k);
  if (opt.temperature == 0) return greedy_token(logits, vocab);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  // Highest logits first, ties to the lowest id: the order every rule below reads.
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
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

int32_t greedy_token(std::span<const double> logits, int64_t vocab) {
  HYB_CHECK(vocab >= 1 && vocab <= int64_t(logits.size()), "greedy_token: vocab ", vocab, " outside [1, ", logits.size(), "]");
  int32_t best = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    HYB_CHECK(std::isfinite(logits[size_t(v)]), "greedy decoding: the logit of token ", v, " is ", logits[size_t(v)]);
    if (logits[size_t(v)] > logits[size_t(best)]) best = int32_t(v);
  }
  return best;
}

std::vector<std::vector<int32_t>> greedy_decode(CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                                                int64_t n_new, Device device, DType compute) {
  HYB_CHECK(!prompts.empty() && !prompts[0].empty(), "greedy_decode: no prompt, or an empty one");
  const int64_t B = int64_t(prompts.size()), L = int64_t(prompts[0].size());
  std::vector<int32_t> ids;
  ids.reserve(size_t(B * L));
  for (const std::vector<int32_t>& p : prompts) {
    HYB_CHECK(int64_t(p.size()) == L, "greedy_decode: prompts of ", L, " and ", p.size(), " tokens in one batch");
    ids.insert(ids.end(), p.begin(), p.end());
  }
  NoGradGuard no_grad;
  LmDecodeState state = model.start_decode(B, device, compute);
  Tensor next = Tensor::from_vector(ids, {B, L});
  const int64_t vocab = model.config().real_vocab, vp = model.config().vocab_size;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  for (int64_t step = 0; step < n_new; ++step) {
    const std::vector<double> z = model.decode_last_logits(next.to(device), state, compute).data().to_double_vector();
    std::vector<int32_t> chosen(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      chosen[size_t(b)] = greedy_token(std::span<const double>(z).subspan(size_t(b * vp), size_t(vp)), vocab);
      out[size_t(b)].push_back(chosen[size_t(b)]);
    }
    next = Tensor::from_vector(chosen, {B, 1});
  }
  return out;
}

}  // namespace hyb
