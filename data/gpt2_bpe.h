// GPT-2's byte-level BPE, read from OpenAI's encoder.json (token string -> id) and vocab.bpe (the
// merges in rank order). Token strings there spell bytes through GPT-2's bytes_to_unicode table; we
// map them back to bytes once at load and work on bytes and ids from then on. Text is split by
// gpt2_piece_end, each piece starts as one token per byte, and the lowest-ranked adjacent pair is
// merged everywhere, left to right, until no pair has a rank (OpenAI's encoder.py). Pieces seen
// before come from a cache.
//   Gpt2Bpe bpe("data/gpt2");   bpe.encode("Hello world") == {15496, 995}
#pragma once
#include <string>
#include <unordered_map>

#include "data/tokenizer.h"

namespace hyb {

class Gpt2Bpe final : public Tokenizer {
 public:
  static constexpr int32_t kEndOfText = 50256;

  explicit Gpt2Bpe(const std::string& dir);  // dir holds encoder.json and vocab.bpe
  std::string name() const override { return "gpt2"; }
  int64_t vocab_size() const override { return int64_t(token_bytes_.size()); }
  void encode(std::string_view text, std::vector<int32_t>& out) override;
  using Tokenizer::encode;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t byte_length(int32_t id) const override;
  std::optional<int32_t> eot() const override { return kEndOfText; }
  const std::string& token_bytes(int32_t id) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Cleared when it reaches this many pieces, so memory stays bounded on any input.
  static constexpr size_t kCacheLimit = size_t(1) << 20;

  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  const Merge* find_merge(int32_t a, int32_t b) const;

  std::vector<std::string> token_bytes_;    // id -> bytes
  int32_t byte_id_[256];                    // byte -> id of the one-byte token
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, result
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace hyb
