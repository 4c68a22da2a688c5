// The two tokenizers a config can name (config.md 5, data.tokenizer): "gpt2", GPT-2's byte-level
// BPE (50257 ids, data/gpt2_bpe.h), and "byte", one id per byte (256 ids). Both are lossless on any
// byte string, valid UTF-8 or not: decode(encode(s)) == s.
//   auto tok = make_tokenizer("gpt2");
//   std::vector<int32_t> ids = tok->encode("Hello world");   // {15496, 995}
//   std::string bytes = tok->decode(ids);
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hyb {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Appends the ids of text to out. Not const: GPT-2 keeps a cache of pieces it has seen.
  virtual void encode(std::string_view text, std::vector<int32_t>& out) = 0;
  std::vector<int32_t> encode(std::string_view text) {
    std::vector<int32_t> out;
    encode(text, out);
    return out;
  }
  // The bytes the ids stand for; an id outside the vocabulary is an error naming it.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Bytes of text a token stands for, 0 for a special token (eval.md 2, bits per byte).
  virtual int64_t byte_length(int32_t id) const = 0;
  // The end-of-text id (GPT-2: 50256), if the tokenizer has one.
  virtual std::optional<int32_t> eot() const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  void encode(std::string_view text, std::vector<int32_t>& out) override;
  using Tokenizer::encode;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t byte_length(int32_t) const override { return 1; }
  std::optional<int32_t> eot() const override { return std::nullopt; }
};

// "gpt2" (files from gpt2_dir, default find_data_path("gpt2")) or "byte".
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& gpt2_dir = "");

// The repository's data/<rel>: ./data/<rel> if it exists, else under the source tree the binary was
// built from; an error names both places.
std::string find_data_path(const std::string& rel);

}  // namespace hyb
