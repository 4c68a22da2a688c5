// The needle test's prompts (eval.md 5.1): a city name and a 5- to 7-digit number, the needle
// " The special magic number for {key} is {number}." hidden at depth d of a held-out haystack slice,
// and the question that ends right before the answer, so a base model answers by continuation.
//   NiahHaystack hay = niah_brown_haystack(*tok);
//   NiahPrompts prompts(*tok, hay.tokens);        // checks the 48 keys against the tokenizer
//   RngStream rng(seed, "niah/3/5");
//   NiahTrial t = prompts.trial(512, 50, rng);    // t.prompt: exactly 512 tokens
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "data/tokenizer.h"

namespace hyb {

struct NiahKey {
  const char* city;
  int32_t id;  // GPT-2's id of the city with its leading space: one token
};
std::span<const NiahKey> niah_keys();  // the 48 of eval.md 5.1, in its order

inline constexpr int64_t kNiahMinHaystack = 16;     // fewer haystack tokens than this is an error
inline constexpr int64_t kNiahSentenceSearch = 64;  // how far back the insertion point may move

struct NiahHaystack {
  std::string name;             // "brown.test" or "filler"
  std::vector<int32_t> tokens;  // H
  std::string sha256;           // of the tokens as little-endian uint16, as in a shard manifest
};

// brown.test of eval.md 1.1 (end-of-text tokens between samples kept), encoded from the bundled
// corpus, so the needle test needs no tokenized shard.
NiahHaystack niah_brown_haystack(Tokenizer& tok);
// The passkey filler of Mohtashami and Jaggi repeated to at least min_tokens tokens.
NiahHaystack niah_filler_haystack(Tokenizer& tok, int64_t min_tokens);

// Whether a token's text ends a sentence: it ends in '.', '!' or '?' (then at most one closing
// quote: " ' U+201D U+2019) or holds a newline.
bool ends_sentence(std::string_view text);

struct NiahTrial {
  std::vector<int32_t> prompt;  // H[o .. o+i) ++ N ++ H[o+i .. o+h) ++ Q: exactly L tokens
  int32_t key = 0;              // the city's id
  std::string number;           // decimal, no separators
  int64_t offset = 0;           // o
  int64_t h = 0;                // haystack tokens in the prompt
  int64_t insert = 0;           // i: the needle's first token in the prompt
  int64_t needle_tokens = 0;    // |N|
  double depth() const { return double(insert) / double(h); }  // the actual depth
};

class NiahPrompts {
 public:
  // Throws naming the city when a key does not encode to exactly its id.
  NiahPrompts(Tokenizer& tok, std::vector<int32_t> haystack);
  // A trial of L tokens with the needle at depth_percent (0 .. 100). Draws from rng in this order:
  // key, digit count D, number, offset o; then, while the key's id occurs in the slice, a new key.
  NiahTrial trial(int64_t L, double depth_percent, RngStream& rng);
  // i for the slice H[o .. o+h) (5.1 step 3): h at 100%, else the largest i <= floor(d h), at most
  // kNiahSentenceSearch back, with i = 0 or H[o+i-1] ending a sentence; floor(d h) if none is.
  int64_t insertion_index(int64_t o, int64_t h, double depth_percent) const;
  const std::vector<int32_t>& haystack() const { return haystack_; }

 private:
  Tokenizer& tok_;
  std::vector<int32_t> haystack_;
  std::vector<bool> sentence_end_;  // by token id: ends_sentence(its text)
};

}  // namespace hyb
