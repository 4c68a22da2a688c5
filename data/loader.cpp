// DataLoader and EvalWindows. Windows are stored as stream offsets (8 bytes per window: 80 MB for
// 10B tokens at T = 1024), and the shuffled order of only the current epoch is kept.
#include "data/loader.h"

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "data/shard_glob.h"

namespace hyb {

DataStreams open_data_streams(const std::vector<std::string>& train, const std::vector<std::string>& val, double val_fraction) {
  HYB_CHECK(val_fraction >= 0.0 && val_fraction < 0.5, "data.val_fraction: expected a number in [0, 0.5), got ", val_fraction);
  HYB_CHECK(val.empty() || val_fraction == 0.0, "data.val and data.val_fraction = ", val_fraction,
            " are given together; use one of them");
  HYB_CHECK(!train.empty(), "data.train: no training shards given");
  DataStreams d;
  d.train = TokenStream::open(expand_shard_paths(train));
  if (val_fraction > 0.0) {
    const int64_t n = d.train.size(), n_val = int64_t(std::floor(val_fraction * double(n)));
    std::tie(d.train, d.val) = d.train.split_at(n - n_val);
  } else if (!val.empty()) {
    d.val = TokenStream::open(expand_shard_paths(val));
  }
  return d;
}

std::pair<int64_t, int64_t> rank_share(int64_t count, int rank, int world_size) {
  HYB_ASSERT(world_size >= 1 && rank >= 0 && rank < world_size, "rank ", rank, " of ", world_size);
  return {count * rank / world_size, count * (rank + 1) / world_size};
}

DataLoader::DataLoader(TokenStream train, const LoaderOptions& options) : stream_(std::move(train)), opt_(options) {
  const int64_t T = opt_.seq_len;
  HYB_CHECK(T >= 1, "data loader: seq_len must be >= 1, got ", T);
  HYB_CHECK(opt_.batch_size >= 1, "data loader: batch_size must be >= 1, got ", opt_.batch_size);
  HYB_CHECK(opt_.world_size >= 1 && opt_.rank >= 0 && opt_.rank < opt_.world_size, "data loader: rank ", opt_.rank,
            " is not in [0, ", opt_.world_size, ")");
  HYB_CHECK(opt_.batch_size % opt_.world_size == 0, "data loader: batch_size ", opt_.batch_size,
            " is not a multiple of the number of ranks ", opt_.world_size);
  HYB_CHECK(opt_.vocab_size >= 1, "data loader: vocab_size must be >= 1, got ", opt_.vocab_size);
  for (size_t i = 0; i < stream_.segments().size(); ++i) {
    const int64_t n = stream_.segments()[i].size();
    const int64_t windows = n >= 1 ? (n - 1) / T : 0;
    for (int64_t k = 0; k < windows; ++k) window_start_.push_back(stream_.segment_start(i) + k * T);
  }
  HYB_CHECK(!window_start_.empty(), "data loader: the training stream holds no window of seq_len + 1 = ", T + 1,
            " tokens within one shard: ", stream_.describe());
  HYB_CHECK(window_start_.size() <= UINT32_MAX, "data loader: ", window_start_.size(),
            " windows per epoch; at most 2^32 - 1 are supported (raise seq_len)");
}

void DataLoader::prepare_epoch(int64_t epoch) {
  if (!opt_.shuffle || order_epoch_ == epoch) return;
  // Fisher-Yates from the back: slot i swaps with a uniform j in [0, i] (Lemire's exact method).
  order_.resize(window_start_.size());
  std::iota(order_.begin(), order_.end(), uint32_t(0));
  RngStream rng(opt_.seed, "data.shuffle.epoch" + std::to_string(epoch));
  for (size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[rng.below(uint32_t(i + 1))]);
  order_epoch_ = epoch;
}

int64_t DataLoader::window_offset(int64_t epoch, int64_t index) {
  HYB_ASSERT(index >= 0 && index < windows_per_epoch(), "window ", index, " of ", windows_per_epoch());
  prepare_epoch(epoch);
  return window_start_[size_t(opt_.shuffle ? order_[size_t(index)] : index)];
}

Batch DataLoader::next_batch() {
  const int64_t T = opt_.seq_len;
  const auto [lo, hi] = rank_share(opt_.batch_size, opt_.rank, opt_.world_size);
  Batch b{Tensor::empty({hi - lo, T}, DType::i32), Tensor::empty({hi - lo, T}, DType::i32)};
  int32_t* in = b.inputs.data<int32_t>();
  int32_t* tg = b.targets.data<int32_t>();
  std::vector<int32_t> window(size_t(T + 1));
  for (int64_t k = 0; k < opt_.batch_size; ++k) {
    if (k >= lo && k < hi) {
      stream_.read(window_offset(epoch_, position_), T + 1, window.data(), opt_.vocab_size);
      std::copy(window.begin(), window.end() - 1, in + (k - lo) * T);
      std::copy(window.begin() + 1, window.end(), tg + (k - lo) * T);
    }
    if (++position_ == windows_per_epoch()) ++epoch_, position_ = 0;
  }
  return b;
}

nlohmann::json DataLoader::cursor() const {
  return {{"epoch", epoch_},   {"position", position_}, {"windows_per_epoch", windows_per_epoch()},
          {"seq_len", opt_.seq_len}, {"shuffle", opt_.shuffle},  {"seed", opt_.seed}};
}

void DataLoader::restore(const nlohmann::json& c) {
  auto expect = [&](const char* key, const nlohmann::json& mine) {
    HYB_CHECK(c.contains(key), "data cursor: missing key \"", key, "\"");
    HYB_CHECK(c.at(key) == mine, "data cursor: ", key, " was ", c.at(key).dump(), " when it was saved but is ", mine.dump(),
              " now; the cursor does not fit this data");
  };
  expect("windows_per_epoch", windows_per_epoch());
  expect("seq_len", opt_.seq_len);
  expect("shuffle", opt_.shuffle);
  expect("seed", opt_.seed);
  HYB_CHECK(c.contains("epoch") && c.contains("position"), "data cursor: expected keys \"epoch\" and \"position\"");
  const int64_t epoch = c.at("epoch"), position = c.at("position");
  HYB_CHECK(epoch >= 0 && position >= 0 && position < windows_per_epoch(), "data cursor: position (", epoch, ", ", position,
            ") is outside an epoch of ", windows_per_epoch(), " windows");
  epoch_ = epoch, position_ = position;
}

EvalWindows::EvalWindows(TokenStream stream, int64_t seq_len, int64_t vocab_size, int64_t max_windows)
    : stream_(std::move(stream)), seq_len_(seq_len), vocab_size_(vocab_size) {
  HYB_CHECK(seq_len >= 1, "evaluation windows: seq_len must be >= 1, got ", seq_len);
  count_ = stream_.size() >= 1 ? (stream_.size() - 1) / seq_len : 0;
  if (max_windows >= 0) count_ = std::min(count_, max_windows);
}

Batch EvalWindows::batch(int64_t first, int64_t n) const {
  HYB_CHECK(first >= 0 && n >= 0 && first + n <= count_, "evaluation windows: windows [", first, ", ", first + n,
            ") are outside the ", count_, " windows of ", stream_.describe());
  const int64_t T = seq_len_;
  Batch b{Tensor::empty({n, T}, DType::i32), Tensor::empty({n, T}, DType::i32)};
  std::vector<int32_t> window(size_t(T + 1));
  for (int64_t k = 0; k < n; ++k) {
    stream_.read((first + k) * T, T + 1, window.data(), vocab_size_);
    std::copy(window.begin(), window.end() - 1, b.inputs.data<int32_t>() + k * T);
    std::copy(window.begin() + 1, window.end(), b.targets.data<int32_t>() + k * T);
  }
  return b;
}

}  // namespace hyb
