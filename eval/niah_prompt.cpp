#include "eval/niah_prompt.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/tokenize.h"

namespace hyb {

namespace {

constexpr NiahKey kKeys[] = {
    {"Paris", 6342},      {"London", 3576},    {"Berlin", 11307},   {"Tokyo", 11790},     {"Rome", 10598},
    {"Madrid", 14708},    {"Cairo", 23732},    {"Moscow", 9070},    {"Dublin", 18220},    {"Chicago", 4842},
    {"Boston", 6182},     {"Sydney", 11852},   {"Toronto", 6586},   {"Vienna", 23825},    {"Athens", 21891},
    {"Prague", 37079},    {"Warsaw", 32955},   {"Lisbon", 41898},   {"Oslo", 39636},      {"Stockholm", 29679},
    {"Helsinki", 47688},  {"Brussels", 16445}, {"Amsterdam", 24377}, {"Geneva", 20552},  {"Zurich", 43412},
    {"Munich", 22418},    {"Milan", 21574},    {"Venice", 29702},   {"Florence", 28537},  {"Naples", 49404},
    {"Seattle", 7312},    {"Denver", 10656},   {"Houston", 6995},   {"Dallas", 8533},     {"Atlanta", 9371},
    {"Miami", 8437},      {"Phoenix", 9643},   {"Portland", 10727}, {"Detroit", 8488},    {"Montreal", 12871},
    {"Vancouver", 10930}, {"Melbourne", 14819}, {"Singapore", 12551}, {"Bangkok", 35007}, {"Beijing", 11618},
    {"Shanghai", 21865},  {"Seoul", 22372},    {"Mumbai", 22917},
};
static_assert(std::size(kKeys) == 48);

constexpr std::string_view kFiller =
    " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

std::string needle_text(const char* city, const std::string& number) {
  return str_cat(" The special magic number for ", city, " is ", number, ".");
}

std::string question_text(const char* city) {
  return str_cat("\nWhat is the special magic number for ", city, "? The special magic number for ", city, " is");
}

NiahHaystack make_haystack(std::string name, const std::vector<uint16_t>& tokens) {
  return {std::move(name), std::vector<int32_t>(tokens.begin(), tokens.end()), tokens_sha256(tokens)};
}

}  // namespace

std::span<const NiahKey> niah_keys() { return kKeys; }

NiahHaystack niah_brown_haystack(Tokenizer& tok) {
  const std::vector<TokenSplit> splits = preset_splits("brown", tok);
  const auto test = std::find_if(splits.begin(), splits.end(), [](const TokenSplit& s) { return s.name == "brown.test"; });
  HYB_ASSERT(test != splits.end(), "preset_splits(\"brown\") has no brown.test");
  return make_haystack(test->name, test->tokens);
}

NiahHaystack niah_filler_haystack(Tokenizer& tok, int64_t min_tokens) {
  const int64_t per_copy = int64_t(tok.encode(kFiller).size());
  std::string text;
  for (int64_t n = 0; n < min_tokens; n += per_copy) text += kFiller;
  std::vector<uint16_t> tokens;
  for (int32_t id : tok.encode(text)) tokens.push_back(uint16_t(id));
  return make_haystack("filler", tokens);
}

bool ends_sentence(std::string_view text) {
  if (text.find('\n') != std::string_view::npos) return true;
  for (std::string_view quote : {"\"", "'", "\u201d", "\u2019"})
    if (text.ends_with(quote)) {
      text.remove_suffix(quote.size());
      break;
    }
  return !text.empty() && (text.back() == '.' || text.back() == '!' || text.back() == '?');
}

NiahPrompts::NiahPrompts(Tokenizer& tok, std::vector<int32_t> haystack) : tok_(tok), haystack_(std::move(haystack)) {
  for (const NiahKey& k : kKeys) {
    const std::vector<int32_t> ids = tok.encode(str_cat(" ", k.city));
    HYB_CHECK(ids.size() == 1 && ids[0] == k.id, "eval niah: the key \" ", k.city, "\" must encode to the one token ",
              k.id, " (eval.md 5.1), but the ", tok.name(), " tokenizer gives ", ids.size(), " token(s), the first ",
              ids.empty() ? -1 : ids[0]);
  }
  sentence_end_.resize(size_t(tok.vocab_size()));
  for (int32_t id = 0; id < int32_t(tok.vocab_size()); ++id)
    sentence_end_[size_t(id)] = ends_sentence(tok.decode(std::span<const int32_t>(&id, 1)));
  for (int32_t id : haystack_)
    HYB_CHECK(id >= 0 && id < tok.vocab_size(), "eval niah: haystack token ", id, " outside the ", tok.name(), " vocabulary");
}

int64_t NiahPrompts::insertion_index(int64_t o, int64_t h, double depth_percent) const {
  if (depth_percent >= 100) return h;
  // Percent times h is an exact integer for whole percents, so the floor is exact too.
  const int64_t i0 = int64_t(std::floor(depth_percent * double(h) / 100));
  for (int64_t i = i0; i >= std::max<int64_t>(0, i0 - kNiahSentenceSearch); --i)
    if (i == 0 || sentence_end_[size_t(haystack_[size_t(o + i - 1)])]) return i;
  return i0;
}

NiahTrial NiahPrompts::trial(int64_t L, double depth_percent, RngStream& rng) {
  HYB_CHECK(depth_percent >= 0 && depth_percent <= 100, "eval niah: depth ", depth_percent, "% outside [0, 100]");
  NiahTrial t;
  size_t key = rng.below(uint32_t(std::size(kKeys)));
  const int digits = 5 + int(rng.below(3));
  const uint32_t lowest = uint32_t(std::lround(std::pow(10.0, digits - 1)));
  t.number = std::to_string(lowest + rng.below(9 * lowest));
  const std::vector<int32_t> needle = tok_.encode(needle_text(kKeys[key].city, t.number));
  const std::vector<int32_t> question = tok_.encode(question_text(kKeys[key].city));
  t.h = L - int64_t(needle.size()) - int64_t(question.size());
  HYB_CHECK(t.h >= kNiahMinHaystack, "eval niah: length L = ", L, " leaves ", t.h, " haystack tokens beside the needle (",
            needle.size(), ") and the question (", question.size(), "), fewer than ", kNiahMinHaystack,
            "; give longer --lengths");
  HYB_CHECK(t.h <= int64_t(haystack_.size()), "eval niah: length L = ", L, " needs ", t.h, " haystack tokens, the haystack has ",
            haystack_.size());
  t.offset = rng.below(uint32_t(int64_t(haystack_.size()) - t.h + 1));
  const auto slice = std::span<const int32_t>(haystack_).subspan(size_t(t.offset), size_t(t.h));
  auto in_slice = [&](int32_t id) { return std::find(slice.begin(), slice.end(), id) != slice.end(); };
  HYB_CHECK(!std::all_of(std::begin(kKeys), std::end(kKeys), [&](const NiahKey& k) { return in_slice(k.id); }),
            "eval niah: every key occurs in the haystack slice at offset ", t.offset, " of L = ", L);
  while (in_slice(kKeys[key].id)) key = rng.below(uint32_t(std::size(kKeys)));
  t.key = kKeys[key].id;
  // A key is one token, so the new key's needle and question have the lengths h was cut for.
  const std::vector<int32_t> n = tok_.encode(needle_text(kKeys[key].city, t.number));
  const std::vector<int32_t> q = tok_.encode(question_text(kKeys[key].city));
  HYB_ASSERT(n.size() == needle.size() && q.size() == question.size(), "needle or question length changed with the key");
  t.needle_tokens = int64_t(n.size());
  t.insert = insertion_index(t.offset, t.h, depth_percent);
  t.prompt.reserve(size_t(L));
  t.prompt.insert(t.prompt.end(), slice.begin(), slice.begin() + t.insert);
  t.prompt.insert(t.prompt.end(), n.begin(), n.end());
  t.prompt.insert(t.prompt.end(), slice.begin() + t.insert, slice.end());
  t.prompt.insert(t.prompt.end(), q.begin(), q.end());
  HYB_ASSERT(int64_t(t.prompt.size()) == L, "needle prompt of ", t.prompt.size(), " tokens, expected ", L);
  return t;
}

}  // namespace hyb
