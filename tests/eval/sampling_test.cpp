// Greedy decoding (eval/sampling.h): the argmax rule, and a batch decoded through the caches against
// the argmax of the parallel forward re-run on each prompt plus what it generated so far.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "autograd/tape.h"
#include "eval/sampling.h"
#include "layers/mixer_test_util.h"
#include "layers/module.h"

using namespace hyb;

TEST_CASE("greedy_token takes the largest of the real vocabulary, the lowest id on a tie, and rejects NaN", "[eval][sampling]") {
  const std::vector<double> z{0.5, 2.0, -1.0, 2.0, 9.0};
  CHECK(greedy_token(z, 4) == 1);  // 1 and 3 tie; the padded column 4 does not count
  CHECK(greedy_token(z, 5) == 4);
  RngStream rng(0, "test");
  CHECK(sample_token(z, 4, {0.0, 0}, rng) == 1);
  const std::vector<double> bad{0.5, NAN, 1.0};
  REQUIRE_THROWS_WITH(greedy_token(bad, 3), Catch::Contains("logit of token 1 is nan"));
}

TEST_CASE("greedy_decode of a batch through the decode caches equals greedy steps of the full forward", "[eval][sampling][decode]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  const auto attention = [](int64_t window) {
    return resolve_test_mixer("attention", {{"num_heads", 2}, {"head_dim", 4}, {"window", window}}, {});
  };
  CausalLM lm(small_decode_lm({{attention(3), "swiglu", 12}, {attention(0), "swiglu", 12}}));
  lm.initialize(5);
  randomize_parameters(lm, 6);
  const int64_t B = 3, L = 9, G = 6;
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < L; ++t) prompts[size_t(b)].push_back(int32_t((b * 5 + t * 7 + 1) % 13));
  const std::vector<std::vector<int32_t>> got = greedy_decode(lm, prompts, G, Device::cpu(), DType::f64);
  REQUIRE(got.size() == size_t(B));
  NoGradGuard no_grad;
  std::set<int32_t> seen;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> seq = prompts[size_t(b)];
    for (int64_t s = 0; s < G; ++s) {
      const int64_t n = int64_t(seq.size());
      const Tensor z = lm.logits(Tensor::from_vector(seq, {1, n}), DType::f64).data().select(0, n - 1);
      const int32_t want = greedy_token(z.to_double_vector(), 13);
      REQUIRE(got[size_t(b)].size() == size_t(G));
      CHECK(got[size_t(b)][size_t(s)] == want);
      seq.push_back(want);
      seen.insert(want);
    }
  }
  CHECK(seen.size() > 1);  // the rows do not all repeat one token: the comparison says something
}
