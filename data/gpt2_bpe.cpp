// GPT-2 BPE: loading OpenAI's files, the merge loop, encode/decode.
// The merge loop runs in rounds as encoder.py does (the lowest-ranked pair, merged at every place
// it occurs, left to right), but finds pairs through a heap, so a long piece (a run of 10^5 spaces
// or digits) costs O(n log n) instead of encoder.py's O(n^2). A round collects every pair of its
// rank before it merges anything: a merge can create a pair of lower rank, and encoder.py only
// looks at that pair after the round.
#include "data/gpt2_bpe.h"

#include <array>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.h"
#include "core/safetensors.h"
#include "data/gpt2_pretokenize.h"
#include "data/utf8.h"

namespace hyb {

namespace {

// GPT-2's bytes_to_unicode, inverted: code point -> byte, -1 where no byte maps there. Printable
// Latin-1 bytes stand for themselves, the other 68 take U+0100 upward in byte order.
std::array<int, 324> unicode_to_byte() {
  std::array<int, 324> t;
  t.fill(-1);
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  int extra = 0;
  for (int b = 0; b < 256; ++b) t[printable(b) ? b : 256 + extra++] = b;
  return t;
}

}  // namespace

Gpt2Bpe::Gpt2Bpe(const std::string& dir) {
  const auto to_byte = unicode_to_byte();
  const std::string enc_path = dir + "/encoder.json", bpe_path = dir + "/vocab.bpe";
  auto token_to_bytes = [&](const std::string& path, const std::string& token) {
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      const Utf8Char c = utf8_decode(token, i);
      HYB_CHECK(c.cp < to_byte.size() && to_byte[c.cp] >= 0, path, ": token \"", token,
                "\" has a character outside GPT-2's byte alphabet");
      bytes.push_back(char(to_byte[c.cp]));
      i += size_t(c.len);
    }
    return bytes;
  };

  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(read_file(enc_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(enc_path, ": not valid JSON: ", e.what()));
  }
  HYB_CHECK(enc.is_object() && !enc.empty(), enc_path, ": expected an object {token: id}");
  token_bytes_.assign(enc.size(), std::string());
  std::vector<bool> seen(enc.size(), false);
  std::unordered_map<std::string, int32_t> id_of;
  for (const auto& [token, value] : enc.items()) {
    HYB_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < int64_t(enc.size()), enc_path,
              ": token \"", token, "\": id ", value.dump(), " is not in [0, ", enc.size(), ")");
    const int32_t id = value.get<int32_t>();
    HYB_CHECK(!seen[size_t(id)], enc_path, ": id ", id, " is given twice");
    seen[size_t(id)] = true;
    token_bytes_[size_t(id)] = token_to_bytes(enc_path, token);
    if (id != kEndOfText) id_of.emplace(token_bytes_[size_t(id)], id);
  }
  const auto eot_it = enc.find("<|endoftext|>");
  HYB_CHECK(eot_it != enc.end() && *eot_it == kEndOfText, enc_path,
            ": expected \"<|endoftext|>\" to be id ", kEndOfText);
  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(std::string(1, char(b)));
    HYB_CHECK(it != id_of.end(), enc_path, ": no token for byte ", b);
    byte_id_[b] = it->second;
  }

  // encoder.py: bpe_data.split('\n')[1:-1] -- the version line and the text after the last newline
  // are not merges; a duplicated merge keeps its last rank (a dict built from the list).
  const std::string text = read_file(bpe_path);
  std::vector<std::string_view> lines;
  for (size_t start = 0;;) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string::npos) break;
    lines.emplace_back(text.data() + start, nl - start);
    start = nl + 1;
  }
  HYB_CHECK(!lines.empty() && lines[0].starts_with("#version"), bpe_path, ": expected a first line \"#version: ...\"");
  for (size_t rank = 1; rank < lines.size(); ++rank) {
    const std::string_view line = lines[rank];
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    HYB_CHECK(sp != std::string_view::npos && sp > 0 && line.find(' ', sp + 1) == std::string_view::npos, bpe_path, ": line ",
              rank + 1, ": expected two tokens separated by one space, got \"", line, "\"");
    const std::string a = token_to_bytes(bpe_path, std::string(line.substr(0, sp)));
    const std::string b = token_to_bytes(bpe_path, std::string(line.substr(sp + 1)));
    auto ia = id_of.find(a), ib = id_of.find(b), im = id_of.find(a + b);
    HYB_CHECK(ia != id_of.end() && ib != id_of.end() && im != id_of.end(), bpe_path, ": line ", rank + 1, ": merge \"", line,
              "\" uses or makes a token that is not in encoder.json");
    merges_[uint64_t(uint32_t(ia->second)) << 32 | uint32_t(ib->second)] = Merge{int32_t(rank), im->second};
  }
}

const Gpt2Bpe::Merge* Gpt2Bpe::find_merge(int32_t a, int32_t b) const {
  auto it = merges_.find(uint64_t(uint32_t(a)) << 32 | uint32_t(b));
  return it == merges_.end() ? nullptr : &it->second;
}

void Gpt2Bpe::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t n = int32_t(piece.size());
  struct Symbol {
    int32_t id, prev, next;  // prev/next: neighbouring live symbols, -1 at the ends
  };
  struct Pair {
    int32_t rank, left, left_id, right_id;  // left: index of the left symbol when it was pushed
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) sym[size_t(i)] = {byte_id_[uint8_t(piece[size_t(i)])], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Pair, std::vector<Pair>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || sym[size_t(left)].next < 0) return;
    const int32_t a = sym[size_t(left)].id, b = sym[size_t(sym[size_t(left)].next)].id;
    if (const Merge* m = find_merge(a, b)) heap.push({m->rank, left, a, b});
  };
  // A pushed pair is stale once either symbol has merged with something else.
  auto live = [&](const Pair& p) {
    const Symbol& l = sym[size_t(p.left)];
    return l.id == p.left_id && l.next >= 0 && sym[size_t(l.next)].id == p.right_id;
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<Pair> round;
  while (!heap.empty()) {
    round.clear();
    const int32_t rank = heap.top().rank;
    while (!heap.empty() && heap.top().rank == rank) {
      round.push_back(heap.top());
      heap.pop();
    }
    for (const Pair& p : round) {  // in left-to-right order: the heap breaks rank ties by position
      if (!live(p)) continue;
      Symbol& l = sym[size_t(p.left)];
      const int32_t right = l.next;
      l.id = find_merge(p.left_id, p.right_id)->merged;
      l.next = sym[size_t(right)].next;
      if (l.next >= 0) sym[size_t(l.next)].prev = p.left;
      sym[size_t(right)].id = -1;
      push(l.prev);
      push(p.left);
    }
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

void Gpt2Bpe::encode(std::string_view text, std::vector<int32_t>& out) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text.size();) {
    const size_t j = gpt2_piece_end(text, i);
    const std::string_view piece = text.substr(i, j - i);
    i = j;
    if (piece.size() == 1) {
      out.push_back(byte_id_[uint8_t(piece[0])]);
      continue;
    }
    if (auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      continue;
    }
    ids.clear();
    bpe(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cache_.size() >= kCacheLimit) cache_.clear();
    cache_.emplace(std::string(piece), ids);
  }
}

const std::string& Gpt2Bpe::token_bytes(int32_t id) const {
  HYB_CHECK(id >= 0 && id < int32_t(token_bytes_.size()), "gpt2 tokenizer: token id ", id, " is not in [0, ",
            token_bytes_.size(), ")");
  return token_bytes_[size_t(id)];
}

std::string Gpt2Bpe::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

int64_t Gpt2Bpe::byte_length(int32_t id) const { return id == kEndOfText ? 0 : int64_t(token_bytes(id).size()); }

}  // namespace hyb
