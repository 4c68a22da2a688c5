// The GPT-2 pattern as a hand-written matcher. Each branch below is one alternative of the
// pattern, tried in the pattern's order; a branch that cannot match falls through to the next,
// which is what the regex engine's backtracking amounts to for this pattern.
#include "data/gpt2_pretokenize.h"

#include "data/utf8.h"

namespace hyb {

namespace {

struct Char {
  int len;
  CharClass cls;
};

Char char_at(std::string_view text, size_t i) {
  const Utf8Char c = utf8_decode(text, i);
  return {c.len, char_class(c.cp)};
}

// End of the run of characters of class cls starting at i.
size_t run_end(std::string_view text, size_t i, CharClass cls) {
  while (i < text.size()) {
    const Char c = char_at(text, i);
    if (c.cls != cls) break;
    i += size_t(c.len);
  }
  return i;
}

// 's 't 're 've 'm 'll 'd (ASCII apostrophe, lower case only): the length matched, or 0.
size_t contraction_length(std::string_view rest) {
  for (std::string_view c : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"})
    if (rest.substr(0, c.size()) == c) return c.size();
  return 0;
}

}  // namespace

size_t gpt2_piece_end(std::string_view text, size_t i) {
  if (size_t n = contraction_length(text.substr(i))) return i + n;
  const Char c0 = char_at(text, i);
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional U+0020, then a run of one class.
  if (text[i] == ' ' && i + 1 < text.size()) {
    const Char c1 = char_at(text, i + 1);
    if (c1.cls != CharClass::Space) return run_end(text, i + 1, c1.cls);
  }
  if (c0.cls != CharClass::Space) return run_end(text, i, c0.cls);
  // "\s+(?!\S)": the whitespace run, less its last character when a non-space follows it;
  // "\s+": a single whitespace character before a non-space (the previous branch matched nothing).
  size_t last = i, end = i;
  while (end < text.size()) {
    const Char c = char_at(text, end);
    if (c.cls != CharClass::Space) break;
    last = end;
    end += size_t(c.len);
  }
  if (end == text.size() || last == i) return end;
  return last;
}

}  // namespace hyb
