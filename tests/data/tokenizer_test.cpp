#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "core/sha256.h"
#include "data/data_test_util.h"
#include "data/gpt2_bpe.h"
#include "data/gpt2_pretokenize.h"
#include "data/utf8.h"

using namespace hyb;
using nlohmann::json;

namespace {

Gpt2Bpe& gpt2() {
  static Gpt2Bpe tok(std::string(HYBRID_SOURCE_DIR) + "/data/gpt2");
  return tok;
}

const json& fixture() {
  static const json j = json::parse(test::read_bytes(std::string(HYBRID_SOURCE_DIR) + "/tests/data/gpt2_fixture.json"));
  return j;
}

std::string ids_sha256(const std::vector<int32_t>& ids) {
  std::vector<uint16_t> u(ids.begin(), ids.end());
  Sha256 h;
  h.update(u.data(), 2 * u.size());
  return h.hex_digest();
}

// Random bytes: runs of valid UTF-8 from several scripts, mixed with malformed bytes.
std::string random_bytes(RngStream& r, int n) {
  static const std::vector<std::string> atoms = {
      "a", "Z", " ", "  ", "\n", "\t", "'s", "'", "7", "42", "\xC3\xA9", "\xCE\xBB", "\xE6\x97\xA5", "\xF0\x9F\x98\x80",
      "\xE2\x80\x83", "\xC2\xA0", "\x80", "\xBF", "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", "\xFF", "\xF0\x9F"};
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (r.below(4) == 0)
      s.push_back(char(r.below(256)));
    else
      s += atoms[r.below(uint32_t(atoms.size()))];
  }
  return s;
}

}  // namespace

TEST_CASE("gpt2 encodes Hello world as 15496 995 and knows end-of-text", "[data][tokenizer]") {
  REQUIRE(gpt2().vocab_size() == 50257);
  REQUIRE(gpt2().encode("Hello world") == std::vector<int32_t>{15496, 995});
  REQUIRE(gpt2().eot() == 50256);
  const std::vector<int32_t> eot = {50256};
  REQUIRE(gpt2().decode(eot) == "<|endoftext|>");
  REQUIRE(gpt2().byte_length(50256) == 0);
  REQUIRE(gpt2().byte_length(15496) == 5);
  // The marker in text is plain text, as in encoder.py: never the special id.
  const auto ids = gpt2().encode("<|endoftext|>");
  REQUIRE(std::find(ids.begin(), ids.end(), 50256) == ids.end());
}

TEST_CASE("gpt2 ids equal those of OpenAI's encoder.py for every fixture string", "[data][tokenizer][gpt2]") {
  const json& cases = fixture().at("cases");
  REQUIRE(cases.size() >= 40);
  for (const json& c : cases) {
    INFO("case: " << c.at("name").get<std::string>());
    const std::string text = c.at("text");
    REQUIRE(gpt2().encode(text) == c.at("ids").get<std::vector<int32_t>>());
    REQUIRE(gpt2().decode(c.at("ids").get<std::vector<int32_t>>()) == text);
  }
}

TEST_CASE("gpt2 ids of the whole Tiny Shakespeare and Brown files match encoder.py's count and hash", "[data][tokenizer][gpt2]") {
  for (const json& f : fixture().at("files")) {
    INFO("file: " << f.at("path").get<std::string>());
    const std::string text = test::read_bytes(std::string(HYBRID_SOURCE_DIR) + "/" + f.at("path").get<std::string>());
    Gpt2Bpe fresh(std::string(HYBRID_SOURCE_DIR) + "/data/gpt2");  // an empty cache: every piece goes through bpe
    const auto ids = fresh.encode(text);
    REQUIRE(int64_t(ids.size()) == f.at("tokens").get<int64_t>());
    REQUIRE(ids_sha256(ids) == f.at("ids_sha256").get<std::string>());
  }
}

TEST_CASE("encode then decode gives back any byte string, malformed UTF-8 included", "[data][tokenizer]") {
  ByteTokenizer bytes;
  RngStream r(17, "test.tokenizer.bytes");
  for (int k = 0; k < 200; ++k) {
    const std::string s = random_bytes(r, 1 + int(r.below(80)));
    INFO("case " << k);
    REQUIRE(gpt2().decode(gpt2().encode(s)) == s);
    const auto b = bytes.encode(s);
    REQUIRE(int64_t(b.size()) == int64_t(s.size()));
    REQUIRE(bytes.decode(b) == s);
  }
}

TEST_CASE("pre-tokenising splits any byte string into non-empty pieces that concatenate back", "[data][tokenizer]") {
  RngStream r(23, "test.tokenizer.pieces");
  for (int k = 0; k < 200; ++k) {
    const std::string s = random_bytes(r, 1 + int(r.below(60)));
    std::string joined;
    for (size_t i = 0; i < s.size();) {
      const size_t j = gpt2_piece_end(s, i);
      REQUIRE(j > i);
      REQUIRE(j <= s.size());
      joined.append(s, i, j - i);
      i = j;
    }
    REQUIRE(joined == s);
  }
}

TEST_CASE("malformed UTF-8 is read one byte at a time and classed as other", "[data][tokenizer][utf8]") {
  for (std::string bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", "\xF8\x88\x80\x80\x80", "\xFF"}) {
    const Utf8Char c = utf8_decode(bad, 0);
    REQUIRE(c.cp == kInvalidCodePoint);
    REQUIRE(c.len == 1);
  }
  REQUIRE(utf8_decode("\xF0\x9F\x98\x80", 0).cp == 0x1F600);
  REQUIRE(utf8_decode("\xF4\x8F\xBF\xBF", 0).cp == 0x10FFFF);
  REQUIRE(char_class(kInvalidCodePoint) == CharClass::Other);
  REQUIRE(char_class(U'\u00e9') == CharClass::Letter);
  REQUIRE(char_class(U'\u0663') == CharClass::Number);
  REQUIRE(char_class(U'\u3000') == CharClass::Space);
  REQUIRE(char_class(0x1C) == CharClass::Other);  // Python's isspace says yes, \s and White_Space say no
  REQUIRE(utf8_sanitize("a\xFF" "b\xE2\x82") == "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("tokenizers refuse ids outside their vocabulary and unknown names", "[data][tokenizer]") {
  ByteTokenizer bytes;
  const std::vector<int32_t> bad_byte = {65, 256};
  REQUIRE_THROWS_WITH(bytes.decode(bad_byte), Catch::Contains("token id 256"));
  const std::vector<int32_t> bad_gpt2 = {50257};
  REQUIRE_THROWS_WITH(gpt2().decode(bad_gpt2), Catch::Contains("token id 50257"));
  REQUIRE_THROWS_WITH(make_tokenizer("bpe"), Catch::Contains("unknown tokenizer \"bpe\""));
  REQUIRE_THROWS_WITH(Gpt2Bpe(test::fresh_dir("no_vocab")), Catch::Contains("encoder.json: cannot open"));
}
