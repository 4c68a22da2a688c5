// UTF-8 decoding and the code point class lookup: ASCII from a 128-entry table, the rest by
// binary search over the generated ranges (792 of them: at most 10 probes).
#include "data/utf8.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace hyb {

namespace {

struct ClassRange {
  uint32_t first, last;
  uint8_t cls;
};

constexpr ClassRange kRanges[] = {
#include "data/unicode_ranges.inc"
};

std::array<CharClass, 128> make_ascii_table() {
  std::array<CharClass, 128> t{};
  for (const ClassRange& r : kRanges)
    for (uint32_t c = r.first; c <= r.last && c < 128; ++c) t[c] = CharClass(r.cls);
  return t;
}

const std::array<CharClass, 128> kAscii = make_ascii_table();

}  // namespace

CharClass char_class(uint32_t cp) {
  if (cp < 128) return kAscii[cp];
  if (cp == kInvalidCodePoint) return CharClass::Other;
  const ClassRange* it = std::upper_bound(std::begin(kRanges), std::end(kRanges), cp,
                                          [](uint32_t c, const ClassRange& r) { return c < r.first; });
  if (it == std::begin(kRanges)) return CharClass::Other;
  --it;
  return cp <= it->last ? CharClass(it->cls) : CharClass::Other;
}

Utf8Char utf8_decode(std::string_view text, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + i;
  const size_t left = text.size() - i;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1};
  int len;
  uint32_t cp, min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {kInvalidCodePoint, 1};  // continuation byte, C0/C1 (always overlong) or F5..FF
  }
  if (left < size_t(len)) return {kInvalidCodePoint, 1};
  for (int k = 1; k < len; ++k) {
    if ((p[k] & 0xC0) != 0x80) return {kInvalidCodePoint, 1};
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalidCodePoint, 1};
  return {cp, len};
}

std::string utf8_sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Char c = utf8_decode(bytes, i);
    if (c.cp == kInvalidCodePoint)
      out += "\xEF\xBF\xBD";
    else
      out.append(bytes.substr(i, size_t(c.len)));
    i += size_t(c.len);
  }
  return out;
}

}  // namespace hyb
