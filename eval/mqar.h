// MQAR scoring (eval.md 4.3): one teacher-forced forward pass per test batch; an example scores
// the fraction of its N queries whose argmax over the V logits (ties to the lowest index) is the
// value; a segment's accuracy is the mean over its examples, the recall score the unweighted mean
// over segments, and the loss the mean cross-entropy over the labelled positions.
//   MqarTestSet test(mqar_config);
//   MqarScore s = evaluate_mqar(model, test, 32, device, compute);
//   append_record(path, mqar_record(s, mqar_config, "recall-64", env));
#pragma once
#include <string>
#include <vector>

#include "data/mqar.h"
#include "eval/records.h"
#include "layers/model/causal_lm.h"
#include "train/config/run_config.h"

namespace hyb {

// Sums over the examples a rank scored, so ranks add up.
struct MqarSegmentScore {
  int64_t seq_len = 0, n_kv = 0;
  int64_t examples = 0, labelled = 0;
  double acc_sum = 0, nll_sum = 0;
  double acc() const { return examples ? acc_sum / double(examples) : 0.0; }
  double loss() const { return labelled ? nll_sum / double(labelled) : 0.0; }
};

struct MqarScore {
  std::vector<MqarSegmentScore> segments;
  double recall_score() const;
  bool saturated() const;  // every segment acc >= 0.99
  bool at_chance() const;  // every segment acc <= 2 / N
  double nll_sum() const;
  int64_t labelled() const;
  // The sums of every segment as one vector (examples, labelled, acc_sum, nll_sum per segment), for
  // adding up across ranks, and back.
  std::vector<double> sums() const;
  void set_sums(const std::vector<double>& v);
};

// Adds the examples of one batch: logits (B*T, Vp) of inputs (B, T), labels `targets` (B, T) with
// kMqarIgnore off the queries; only the first `vocab` columns take part.
void score_mqar_batch(const Tensor& logits, const Tensor& targets, int64_t vocab, MqarSegmentScore* s);

// The test examples of every test segment, drawn in listed order from stream mqar.test with the
// test seed, so every run and seed is scored on the same examples.
struct MqarTestSet {
  explicit MqarTestSet(const MqarConfig& c);
  std::vector<MqarSpec> specs;
  std::vector<Batch> batches;  // test_examples rows each
};

// This rank's share of every segment's examples (rank of world), `batch` examples per forward.
MqarScore evaluate_mqar(CausalLM& model, const MqarTestSet& test, int64_t batch, Device device, DType compute,
                        int rank = 0, int world = 1);

// The `mqar` record (eval.md 4.3); preset "" is written as null.
Record mqar_record(const MqarScore& s, const MqarConfig& c, const std::string& preset, const RecordEnvelope& env);
// A markdown table with one row per segment, the recall score and the flags (eval.md 8.2).
std::string mqar_table(const MqarScore& s);

}  // namespace hyb
