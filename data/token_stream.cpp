// TokenStream: segment bookkeeping and checked reads.
#include "data/token_stream.h"

#include <algorithm>

#include "core/error.h"

namespace hyb {

TokenStream TokenStream::open(const std::vector<std::string>& paths) {
  TokenStream s;
  for (const std::string& p : paths) {
    auto shard = std::make_shared<const MappedShard>(p);
    s.append({shard, 0, shard->size()});
  }
  return s;
}

void TokenStream::append(const StreamSegment& seg) {
  starts_.push_back(size_);
  segments_.push_back(seg);
  size_ += seg.size();
}

std::pair<TokenStream, TokenStream> TokenStream::split_at(int64_t n) const {
  HYB_CHECK(n >= 0 && n <= size_, "split_at: ", n, " is outside the stream of ", size_, " tokens");
  TokenStream head, tail;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const StreamSegment& s = segments_[i];
    const int64_t cut = std::clamp(n - starts_[i], int64_t(0), s.size());
    if (cut > 0) head.append({s.shard, s.begin, s.begin + cut});
    if (cut < s.size()) tail.append({s.shard, s.begin + cut, s.end});
  }
  return {head, tail};
}

namespace {

void read_segment_tokens(const StreamSegment& seg, int64_t start, int64_t n, int32_t* out, int64_t vocab_size) {
  HYB_ASSERT(start >= 0 && start + n <= seg.size(), "read of ", n, " tokens at ", start, " in a segment of ", seg.size());
  const uint16_t* t = seg.shard->tokens() + seg.begin + start;
  for (int64_t k = 0; k < n; ++k) {
    const int32_t id = t[k];
    HYB_CHECK(id < vocab_size, seg.shard->path(), ": token id ", id, " at token offset ", seg.begin + start + k,
              " is not below the vocabulary size ", vocab_size);
    out[k] = id;
  }
}

}  // namespace

void TokenStream::read(int64_t pos, int64_t n, int32_t* out, int64_t vocab_size) const {
  HYB_ASSERT(pos >= 0 && n >= 0 && pos + n <= size_, "read of ", n, " tokens at ", pos, " in a stream of ", size_);
  size_t i = size_t(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin()) - 1;
  while (n > 0) {
    while (segments_[i].size() == 0 || pos - starts_[i] >= segments_[i].size()) ++i;
    const int64_t off = pos - starts_[i], take = std::min(n, segments_[i].size() - off);
    read_segment_tokens(segments_[i], off, take, out, vocab_size);
    out += take, pos += take, n -= take;
  }
}

std::string TokenStream::describe() const {
  std::string s;
  for (const StreamSegment& seg : segments_) s += str_cat(s.empty() ? "" : ", ", seg.shard->path(), " (", seg.size(), " tokens)");
  return s.empty() ? "no shards" : s;
}

}  // namespace hyb
