// The training data loader and the evaluation windows (config.md 5, eval.md 1.2; docs/data.md).
// Training: each shard slice of n tokens holds floor((n - 1) / T) windows of T + 1 tokens, never
// crossing a shard. An epoch visits every window once, in stream order or, with shuffle, in the
// order of a Fisher-Yates permutation drawn from the Philox stream (seed, "data.shuffle.epoch<k>").
// Step s takes the next batch_size windows of that endless sequence (a step may span two epochs);
// rank r of R keeps the contiguous block [r B/R, (r+1) B/R) of them. The cursor (epoch, position)
// counts windows, so a resumed run, on any number of ranks, continues the sequence exactly.
//   DataStreams d = open_data_streams({"data/ts/ts.train.bin"}, {}, 0.1);
//   DataLoader loader(d.train, {.seq_len = 256, .batch_size = 16, .seed = 1, .vocab_size = 50257});
//   Batch b = loader.next_batch();          // b.inputs, b.targets: i32 (16, 256) on the cpu
//   json c = loader.cursor();  ...  loader.restore(c);
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "data/token_stream.h"

namespace hyb {

struct Batch {
  Tensor inputs;   // (B, T) i32: tokens x_0 .. x_{T-1} of each window
  Tensor targets;  // (B, T) i32: tokens x_1 .. x_T
};

struct DataStreams {
  TokenStream train;
  TokenStream val;  // empty when there is no validation data
};

// Opens the shards (paths or globs, expanded by expand_shard_paths). val_fraction f > 0 moves the
// last floor(f n) tokens of the training stream to the validation stream; f with val is an error.
DataStreams open_data_streams(const std::vector<std::string>& train, const std::vector<std::string>& val, double val_fraction);

struct LoaderOptions {
  int64_t seq_len = 1024;     // T
  int64_t batch_size = 1;     // windows per optimizer step, whole job (config.md 6.2)
  bool shuffle = true;
  uint64_t seed = 0;          // the run's seed
  int rank = 0;
  int world_size = 1;
  int64_t vocab_size = 50257;  // every token id must be below it
};

class DataLoader {
 public:
  DataLoader(TokenStream train, const LoaderOptions& options);
  // This rank's share of the next step: (batch_size / world_size, T) inputs and targets.
  Batch next_batch();
  int64_t windows_per_epoch() const { return window_start_.size(); }
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }  // windows of the current epoch already taken
  // {"epoch", "position", "windows_per_epoch", "seq_len", "shuffle", "seed"}; restore checks that
  // the last four still describe this loader's data and names the key that differs.
  nlohmann::json cursor() const;
  void restore(const nlohmann::json& cursor);
  // The stream offset of window w of the epoch order (for tests and tools).
  int64_t window_offset(int64_t epoch, int64_t index);

 private:
  void prepare_epoch(int64_t epoch);

  TokenStream stream_;
  LoaderOptions opt_;
  std::vector<int64_t> window_start_;  // stream offset of every window, in stream order
  std::vector<uint32_t> order_;        // the current epoch's permutation (empty without shuffle)
  int64_t order_epoch_ = -1;
  int64_t epoch_ = 0, position_ = 0;
};

// Evaluation windows (eval.md 1.2): window k is S[kT .. kT + T] for k < K = floor((|S| - 1) / T),
// non-overlapping, crossing shard and document boundaries; max_windows M >= 0 keeps the first M.
class EvalWindows {
 public:
  EvalWindows(TokenStream stream, int64_t seq_len, int64_t vocab_size, int64_t max_windows = -1);
  int64_t count() const { return count_; }
  Batch batch(int64_t first, int64_t n) const;  // windows first .. first + n - 1

 private:
  TokenStream stream_;
  int64_t seq_len_, vocab_size_, count_;
};

// The contiguous share [begin, end) of `count` items that rank r of R takes: [count r / R, count (r+1) / R).
std::pair<int64_t, int64_t> rank_share(int64_t count, int rank, int world_size);

}  // namespace hyb
