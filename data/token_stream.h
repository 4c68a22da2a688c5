// A token stream: slices of memory-mapped shards read as one sequence (config.md 5). The training
// stream is all training shards in order; with val_fraction its last tokens are cut off as the
// validation stream, so a stream may end part-way through a shard. Reads copy tokens to int32 and
// check every id against the vocabulary; an error names the shard and the token's offset in it.
//   TokenStream s = TokenStream::open(expand_shard_paths({"data/ts/ts.train.bin"}));
//   auto [train, val] = s.split_at(s.size() - s.size() / 10);
//   train.read(0, 1025, buf, 50257);
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/shard.h"

namespace hyb {

struct StreamSegment {
  std::shared_ptr<const MappedShard> shard;
  int64_t begin = 0, end = 0;  // the shard's tokens [begin, end)
  int64_t size() const { return end - begin; }
};

class TokenStream {
 public:
  static TokenStream open(const std::vector<std::string>& paths);  // whole shards, in order
  int64_t size() const { return size_; }
  const std::vector<StreamSegment>& segments() const { return segments_; }
  int64_t segment_start(size_t i) const { return starts_[i]; }  // stream offset of segment i
  // The first n tokens and the rest (0 <= n <= size()).
  std::pair<TokenStream, TokenStream> split_at(int64_t n) const;
  // Tokens [pos, pos + n) as int32 into out; every id must be < vocab_size.
  void read(int64_t pos, int64_t n, int32_t* out, int64_t vocab_size) const;
  // "PATH (N tokens)" for each segment, for messages.
  std::string describe() const;

 private:
  void append(const StreamSegment& s);
  std::vector<StreamSegment> segments_;
  std::vector<int64_t> starts_;
  int64_t size_ = 0;
};

}  // namespace hyb
