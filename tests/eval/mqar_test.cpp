#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>

#include "eval/mqar.h"

using namespace hyb;

namespace {

MqarConfig small_config() {
  MqarConfig c;
  c.vocab = 256;
  c.segments = c.test_segments = {{32, 4, std::nullopt}, {64, 8, std::nullopt}};
  c.test_examples = 50;
  return c;
}

// Logits (B*T, Vp) that put `boost` on column `pick(b, t)` of every row.
template <typename Pick>
Tensor logits_for(const Tensor& inputs, int64_t vp, Pick pick) {
  const int64_t B = inputs.size(0), T = inputs.size(1);
  std::vector<float> z(size_t(B * T * vp), 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) z[size_t((b * T + t) * vp + pick(b, t))] = 5.0f;
  return Tensor::from_vector(z, {B * T, vp});
}

}  // namespace

TEST_CASE("mqar scoring: per-example accuracy with ties to the lowest index, loss on labelled positions", "[eval][mqar]") {
  // Two examples of T = 4 over V = 8 (padded to 10 columns, which never take part).
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{-1, 5, -1, 6, -1, -1, 4, -1}, {2, 4});
  std::vector<float> z(8 * 10, 0.0f);
  auto at = [&](int row, int col) -> float& { return z[size_t(row * 10 + col)]; };
  for (int r = 0; r < 8; ++r) at(r, 9) = 100;  // a padded column: ignored
  at(1, 5) = 2;                                // right
  at(3, 2) = at(3, 6) = 1;                     // tie 2 / 6 -> 2: wrong
  at(6, 4) = at(6, 7) = 3;                     // tie 4 / 7 -> 4: right
  MqarSegmentScore s{4, 2};
  score_mqar_batch(Tensor::from_vector(z, {8, 10}), labels, 8, &s);
  CHECK(s.examples == 2);
  CHECK(s.labelled == 3);
  CHECK(s.acc() == Approx(0.75));  // (1/2 + 1/1) / 2: the mean of per-example accuracies
  const double nll = (std::log(std::exp(2.0) + 7) - 2) + (std::log(2 * std::exp(1.0) + 6) - 1) +
                     (std::log(2 * std::exp(3.0) + 6) - 3);
  CHECK(s.loss() == Approx(nll / 3).epsilon(1e-5));
}

TEST_CASE("mqar scoring: an oracle scores 1, a constant model at most 1/N; flags and the record", "[eval][mqar]") {
  const MqarConfig c = small_config();
  const MqarTestSet test(c);
  REQUIRE(test.batches.size() == 2);
  MqarScore oracle, constant;
  for (size_t k = 0; k < test.specs.size(); ++k) {
    const Batch& b = test.batches[k];
    const int64_t T = b.inputs.size(1);
    const std::vector<double> x = b.inputs.to_double_vector();
    // The oracle looks the current token up in the context (keys at even positions < 2N).
    auto lookup = [&](int64_t e, int64_t t) {
      for (int64_t p = 0; p < 2 * test.specs[k].n_kv; p += 2)
        if (x[size_t(e * T + p)] == x[size_t(e * T + t)]) return int64_t(x[size_t(e * T + p + 1)]);
      return int64_t(0);
    };
    MqarSegmentScore so{test.specs[k].seq_len, test.specs[k].n_kv}, sc = so;
    score_mqar_batch(logits_for(b.inputs, 256, lookup), b.targets, 256, &so);
    score_mqar_batch(logits_for(b.inputs, 256, [&](int64_t e, int64_t) { return int64_t(x[size_t(e * T + 1)]); }),
                     b.targets, 256, &sc);
    CHECK(so.examples == 50);
    CHECK(so.acc() == 1.0);
    CHECK(sc.acc() <= 1.0 / double(test.specs[k].n_kv) + 1e-12);
    oracle.segments.push_back(so);
    constant.segments.push_back(sc);
  }
  CHECK(oracle.recall_score() == 1.0);
  CHECK(oracle.saturated());
  CHECK_FALSE(oracle.at_chance());
  CHECK(constant.at_chance());
  CHECK_FALSE(constant.saturated());

  MqarScore split = oracle;
  split.set_sums(oracle.sums());
  CHECK(split.sums() == oracle.sums());

  const auto j = nlohmann::json::parse(mqar_record(oracle, c, "", {"run", "abc", 7, 3}).line());
  CHECK(j["kind"] == "mqar");
  CHECK(j["preset"].is_null());
  CHECK(j["V"] == 256);
  CHECK(j["power_a"] == Approx(0.01));
  CHECK(j["random_fill"] == true);
  CHECK(j["test_seed"] == 1000003);
  REQUIRE(j["segments"].size() == 2);
  CHECK(j["segments"][1]["seq_len"] == 64);
  CHECK(j["segments"][1]["n_kv"] == 8);
  CHECK(j["segments"][1]["examples"] == 50);
  CHECK(j["segments"][1]["acc"] == 1.0);
  CHECK(j["recall_score"] == 1.0);
  CHECK(j["flags"] == nlohmann::json::array({"saturated"}));
  CHECK(mqar_record(constant, c, "recall-64", {}).line().find("\"flags\":[\"at_chance\"]") != std::string::npos);
}

TEST_CASE("the mqar test set depends only on the test seed and segments", "[eval][mqar]") {
  MqarConfig a = small_config(), b = small_config();
  b.train_examples = 10;  // training settings play no part
  const MqarTestSet x(a), y(b);
  for (size_t k = 0; k < 2; ++k) CHECK(x.batches[k].inputs.to_double_vector() == y.batches[k].inputs.to_double_vector());
  b.test_seed = 5;
  CHECK(MqarTestSet(b).batches[0].inputs.to_double_vector() != x.batches[0].inputs.to_double_vector());
}
