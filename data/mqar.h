// The MQAR generator (eval.md 4.1): multi-query associative recall examples as in Zoology's
// multiquery_ar. N key-value pairs open the sequence (keys in 1 .. V/2 - 1, values in V/2 .. V-1);
// each key is asked again once after the context, at a gap drawn from a power law that favours
// early queries, and only the query positions carry a label (the value to predict next).
//   MqarSpec s{.vocab = 8192, .seq_len = 64, .n_kv = 4};
//   RngStream rng(seed, "mqar.train");
//   Batch b = mqar_batch(s, rng, 32);   // inputs (32, 64) i32, targets (32, 64) i32 (-1 unlabelled)
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "data/loader.h"

namespace hyb {

// The label of every position that is not a query: the cross-entropy's ignore index.
constexpr int32_t kMqarIgnore = -1;

struct MqarSpec {
  int64_t vocab = 8192;  // V, even
  int64_t seq_len = 64;  // T, even
  int64_t n_kv = 4;      // N
  double power_a = 0.01;
  bool random_fill = true;
};

// Throws hyb::Error naming the value when 4N <= T < V, N <= V/2 - 1, V and T even, 0 < a <= 1 fail.
void check_mqar_spec(const MqarSpec& s);

struct MqarExample {
  std::vector<int32_t> tokens;  // T
  std::vector<int32_t> labels;  // T: value_i at query i's position, kMqarIgnore elsewhere
};

// One example; every draw comes from `rng`, in the order of eval.md 4.1.
MqarExample mqar_example(const MqarSpec& s, RngStream& rng);

// The N distinct query slots in draw order: successive sampling without replacement from the
// S = (T - 2N) / 2 slots with weights (g + 1)^(a - 1).
std::vector<int64_t> mqar_draw_gaps(int64_t slots, int64_t n, double power_a, RngStream& rng);

// `count` successive examples of one segment as rows of a batch.
Batch mqar_batch(const MqarSpec& s, RngStream& rng, int64_t count);

}  // namespace hyb
