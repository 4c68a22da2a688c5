// GPT-2's pre-tokenisation, written out by hand (no regex library). The pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// is matched leftmost-first at each position, as the `regex` module does in OpenAI's encoder.py;
// the branch-by-branch reasoning is in docs/data.md. Input is UTF-8 bytes; a malformed byte is one
// character of class Other, so every byte string splits into pieces that concatenate back to it.
//   for (size_t i = 0; i < text.size();) { size_t j = gpt2_piece_end(text, i); use(text.substr(i, j - i)); i = j; }
#pragma once
#include <cstddef>
#include <string_view>

namespace hyb {

// The end (exclusive byte offset) of the piece that starts at byte i < text.size().
size_t gpt2_piece_end(std::string_view text, size_t i);

}  // namespace hyb
