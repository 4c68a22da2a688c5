#include "data/mqar.h"

#include <cmath>
#include <numeric>

#include "core/error.h"

namespace hyb {

void check_mqar_spec(const MqarSpec& s) {
  HYB_CHECK(s.vocab >= 4 && s.vocab % 2 == 0, "mqar: vocab must be an even integer >= 4, got ", s.vocab);
  HYB_CHECK(s.seq_len >= 2 && s.seq_len % 2 == 0, "mqar: seq_len must be an even integer >= 2, got ", s.seq_len);
  HYB_CHECK(s.n_kv >= 1, "mqar: n_kv must be >= 1, got ", s.n_kv);
  HYB_CHECK(4 * s.n_kv <= s.seq_len, "mqar: n_kv = ", s.n_kv, " needs 4 n_kv <= seq_len, got seq_len = ", s.seq_len);
  HYB_CHECK(s.seq_len < s.vocab, "mqar: seq_len = ", s.seq_len, " must be below vocab = ", s.vocab);
  HYB_CHECK(s.n_kv <= s.vocab / 2 - 1, "mqar: n_kv = ", s.n_kv, " exceeds vocab / 2 - 1 = ", s.vocab / 2 - 1);
  HYB_CHECK(s.power_a > 0 && s.power_a <= 1, "mqar: power_a must be in (0, 1], got ", s.power_a);
}

namespace {

// The first n entries of a partial Fisher-Yates shuffle of lo .. lo + count - 1.
std::vector<int32_t> distinct_uniform(int64_t lo, int64_t count, int64_t n, RngStream& rng) {
  std::vector<int32_t> pool(static_cast<size_t>(count));
  std::iota(pool.begin(), pool.end(), int32_t(lo));
  for (int64_t i = 0; i < n; ++i) std::swap(pool[size_t(i)], pool[size_t(i + rng.below(uint32_t(count - i)))]);
  pool.resize(size_t(n));
  return pool;
}

}  // namespace

std::vector<int64_t> mqar_draw_gaps(int64_t slots, int64_t n, double power_a, RngStream& rng) {
  std::vector<double> w(static_cast<size_t>(slots));
  for (int64_t g = 0; g < slots; ++g) w[size_t(g)] = std::pow(double(g + 1), power_a - 1);
  std::vector<int64_t> gaps;
  gaps.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    // Summed afresh each draw: subtracting taken weights would drift.
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    const double u = double(rng.uniform()) * total;
    double cum = 0;
    int64_t pick = -1;
    for (int64_t g = 0; g < slots; ++g) {
      if (w[size_t(g)] == 0) continue;
      pick = g;  // rounding can leave u past the last cumulative sum: the last open slot takes it
      cum += w[size_t(g)];
      if (u < cum) break;
    }
    w[size_t(pick)] = 0;
    gaps.push_back(pick);
  }
  return gaps;
}

MqarExample mqar_example(const MqarSpec& s, RngStream& rng) {
  const int64_t T = s.seq_len, N = s.n_kv, half = s.vocab / 2;
  const std::vector<int32_t> keys = distinct_uniform(1, half - 1, N, rng);
  const std::vector<int32_t> values = distinct_uniform(half, half, N, rng);
  MqarExample e{std::vector<int32_t>(size_t(T), -1), std::vector<int32_t>(size_t(T), kMqarIgnore)};
  for (int64_t i = 0; i < N; ++i) {
    e.tokens[size_t(2 * i)] = keys[size_t(i)];
    e.tokens[size_t(2 * i + 1)] = values[size_t(i)];
  }
  const std::vector<int64_t> gaps = mqar_draw_gaps((T - 2 * N) / 2, N, s.power_a, rng);
  for (int64_t i = 0; i < N; ++i) {
    const size_t p = size_t(2 * N + 2 * gaps[size_t(i)]);
    e.tokens[p] = keys[size_t(i)];
    e.labels[p] = values[size_t(i)];
  }
  for (int64_t p = 2 * N; p < T; ++p)
    if (e.tokens[size_t(p)] < 0) e.tokens[size_t(p)] = s.random_fill ? int32_t(rng.below(uint32_t(s.vocab))) : 0;
  return e;
}

Batch mqar_batch(const MqarSpec& s, RngStream& rng, int64_t count) {
  check_mqar_spec(s);
  std::vector<int32_t> tokens, labels;
  tokens.reserve(size_t(count * s.seq_len));
  labels.reserve(size_t(count * s.seq_len));
  for (int64_t b = 0; b < count; ++b) {
    MqarExample e = mqar_example(s, rng);
    tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
    labels.insert(labels.end(), e.labels.begin(), e.labels.end());
  }
  return {Tensor::from_vector(tokens, {count, s.seq_len}), Tensor::from_vector(labels, {count, s.seq_len})};
}

}  // namespace hyb
