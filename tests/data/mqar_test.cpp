#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "data/mqar.h"

using namespace hyb;

namespace {

// The exact probability that the first gap is slot 0: 1 / sum_{g=1..S} g^(a-1).
double first_slot_probability(int64_t slots, double a) {
  double z = 0;
  for (int64_t g = 1; g <= slots; ++g) z += std::pow(double(g), a - 1);
  return 1 / z;
}

void check_invariants(const MqarSpec& s, const MqarExample& e) {
  const int64_t N = s.n_kv, T = s.seq_len, half = s.vocab / 2;
  REQUIRE(int64_t(e.tokens.size()) == T);
  REQUIRE(int64_t(e.labels.size()) == T);
  std::set<int32_t> keys, values;
  std::map<int32_t, int32_t> value_of;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t k = e.tokens[size_t(2 * i)], v = e.tokens[size_t(2 * i + 1)];
    REQUIRE((k >= 1 && k <= half - 1));
    REQUIRE((v >= half && v <= s.vocab - 1));
    keys.insert(k);
    values.insert(v);
    value_of[k] = v;
  }
  REQUIRE(int64_t(keys.size()) == N);
  REQUIRE(int64_t(values.size()) == N);
  for (int64_t p = 0; p < 2 * N; ++p) REQUIRE(e.labels[size_t(p)] == kMqarIgnore);
  int64_t queries = 0;
  std::set<int32_t> asked;
  for (int64_t p = 2 * N; p < T; ++p) {
    const int32_t label = e.labels[size_t(p)], tok = e.tokens[size_t(p)];
    REQUIRE((tok >= 0 && tok < s.vocab));
    if (label == kMqarIgnore) {
      if (!s.random_fill) REQUIRE(tok == 0);
      continue;
    }
    ++queries;
    REQUIRE(p % 2 == 0);
    REQUIRE(p <= T - 2);
    REQUIRE(value_of.count(tok) == 1);
    REQUIRE(value_of[tok] == label);
    asked.insert(tok);
  }
  REQUIRE(queries == N);
  REQUIRE(asked == keys);
  if (!s.random_fill) {
    // Without random filler every key appears exactly twice: in the context and at its query.
    for (int32_t k : keys) REQUIRE(std::count(e.tokens.begin(), e.tokens.end(), k) == 2);
  }
}

}  // namespace

TEST_CASE("mqar examples hold keys, values, context, queries and labels as eval.md 4.1 says", "[data][mqar]") {
  for (bool fill : {false, true}) {
    for (auto [T, N] : std::vector<std::pair<int64_t, int64_t>>{{64, 4}, {64, 16}, {128, 32}, {20, 5}}) {
      MqarSpec s{.vocab = 256, .seq_len = T, .n_kv = N, .power_a = 0.01, .random_fill = fill};
      RngStream rng(7, "mqar.train");
      for (int i = 0; i < 1250; ++i) check_invariants(s, mqar_example(s, rng));  // 10,000 examples in all
    }
  }
}

TEST_CASE("mqar batches are rows of successive examples and depend only on seed and stream", "[data][mqar]") {
  MqarSpec s{.vocab = 512, .seq_len = 32, .n_kv = 4};
  RngStream a(3, "mqar.test"), b(3, "mqar.test"), c(4, "mqar.test"), d(3, "mqar.train"), e(3, "mqar.test");
  Batch x = mqar_batch(s, a, 5), y = mqar_batch(s, b, 5);
  REQUIRE(x.inputs.shape() == Shape{5, 32});
  REQUIRE(x.targets.shape() == Shape{5, 32});
  REQUIRE(x.inputs.to_double_vector() == y.inputs.to_double_vector());
  REQUIRE(x.targets.to_double_vector() == y.targets.to_double_vector());
  REQUIRE(x.inputs.to_double_vector() != mqar_batch(s, c, 5).inputs.to_double_vector());
  REQUIRE(x.inputs.to_double_vector() != mqar_batch(s, d, 5).inputs.to_double_vector());
  const MqarExample first = mqar_example(s, e);
  const std::vector<double> row0 = x.inputs.narrow(0, 0, 1).contiguous().to_double_vector();
  for (size_t p = 0; p < first.tokens.size(); ++p) REQUIRE(row0[p] == first.tokens[p]);
}

TEST_CASE("mqar constraint errors name the offending value", "[data][mqar]") {
  auto message = [](MqarSpec s) {
    try {
      check_mqar_spec(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(message({.vocab = 8192, .seq_len = 60, .n_kv = 16}), Catch::Contains("n_kv = 16") && Catch::Contains("seq_len = 60"));
  CHECK_THAT(message({.vocab = 64, .seq_len = 64, .n_kv = 4}), Catch::Contains("seq_len = 64") && Catch::Contains("vocab = 64"));
  CHECK_THAT(message({.vocab = 8192, .seq_len = 64, .n_kv = 4, .power_a = 1.5}), Catch::Contains("1.5"));
  CHECK_THAT(message({.vocab = 8192, .seq_len = 63, .n_kv = 4}), Catch::Contains("63"));
  CHECK(message({.vocab = 8192, .seq_len = 64, .n_kv = 16}).empty());
}

TEST_CASE("the first query gap follows the power law: P(slot 0) matches 1 / sum g^(a-1)", "[data][mqar]") {
  // T = 256, N = 16: S = 112 slots, P = 0.185; T = 64, N = 4: S = 28 slots, P = 0.2511 (eval.md 9).
  for (auto [T, N, expected] : std::vector<std::tuple<int64_t, int64_t, double>>{{256, 16, 0.185}, {64, 4, 0.2511}}) {
    const int64_t slots = (T - 2 * N) / 2;
    REQUIRE(first_slot_probability(slots, 0.01) == Approx(expected).margin(0.0006));
    RngStream rng(11, "mqar.train");
    const int draws = 40000;
    int zero = 0;
    for (int i = 0; i < draws; ++i) {
      const std::vector<int64_t> g = mqar_draw_gaps(slots, N, 0.01, rng);
      zero += g[0] == 0;
    }
    CHECK(double(zero) / draws == Approx(expected).margin(0.01));
  }
  // The generator uses these gaps: the first pair is queried at 2N exactly when its gap is slot 0.
  MqarSpec s{.vocab = 8192, .seq_len = 64, .n_kv = 4, .random_fill = false};
  RngStream rng(12, "mqar.train");
  int zero = 0;
  const int n = 10000;
  for (int i = 0; i < n; ++i) {
    MqarExample e = mqar_example(s, rng);
    zero += e.labels[8] == e.tokens[1];
  }
  CHECK(double(zero) / n == Approx(0.2511).margin(0.015));
}
