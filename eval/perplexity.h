// Loss, perplexity and token accuracy over evaluation windows (eval.md 2): sums of NLL_t in fp64
// on the host, every target scored once. Runs without the tape; the caller sets eval mode.
#pragma once
#include <optional>
#include <string>

#include "data/loader.h"
#include "eval/records.h"
#include "layers/model/causal_lm.h"

namespace hyb {

struct PplResult {
  double nll_sum = 0;     // sum of NLL_t over scored targets (nats)
  int64_t targets = 0;
  int64_t correct = 0;    // argmax == target
  int64_t windows = 0;
  double loss() const { return targets ? nll_sum / double(targets) : 0.0; }
  double token_acc() const { return targets ? double(correct) / double(targets) : 0.0; }
};

// Windows first .. first + count - 1 (count -1: to the end) are run `batch` at a time on `device`
// with activations in `compute`.
PplResult evaluate_ppl(CausalLM& model, const EvalWindows& windows, int64_t batch, Device device, DType compute,
                       int64_t first = 0, int64_t count = -1);

// The `ppl` record of eval.md 2 for non-overlapping windows of length T; bits per byte where the
// caller counted the bytes.
Record ppl_record(const RecordEnvelope& env, const std::string& split, int64_t T, const PplResult& r,
                  std::optional<double> bits_per_byte = std::nullopt);

}  // namespace hyb
