// UTF-8 for the tokenizers: one code point at a time, with every malformed byte (stray
// continuation, overlong form, surrogate, > U+10FFFF, truncated sequence) read as a unit of its
// own, so any byte string can be split and tokenized without loss. Plus the code point classes of
// GPT-2's pre-tokenising pattern, from the generated table data/unicode_ranges.inc.
//   Utf8Char c = utf8_decode(text, i);   // c.len bytes; c.cp == kInvalidCodePoint for a bad byte
//   CharClass k = char_class(c.cp);      // letter, number, space or other
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace hyb {

constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;

struct Utf8Char {
  uint32_t cp;  // the code point, or kInvalidCodePoint for one malformed byte
  int len;      // bytes consumed: 1..4 (1 for a malformed byte)
};

// Decodes the code point starting at byte i (i < text.size()), strictly per RFC 3629.
Utf8Char utf8_decode(std::string_view text, size_t i);

// \p{L}, \p{N}, \s (Unicode White_Space) and everything else; a malformed byte is Other.
enum class CharClass : uint8_t { Other = 0, Letter = 1, Number = 2, Space = 3 };
CharClass char_class(uint32_t cp);

// The bytes as displayable text: each malformed byte becomes U+FFFD (Python's errors="replace"
// gives one U+FFFD per maximal bad subsequence instead; this is for printing only).
std::string utf8_sanitize(std::string_view bytes);

}  // namespace hyb
