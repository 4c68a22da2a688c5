#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "data/data_test_util.h"
#include "data/gpt2_bpe.h"
#include "data/shard.h"
#include "data/shard_glob.h"
#include "data/tokenize.h"
#include "train/cli.h"

using namespace hyb;
using nlohmann::json;

namespace hyb {
int cmd_tokenize(Args& args);
}

namespace {

const std::string kRoot = HYBRID_SOURCE_DIR;

Gpt2Bpe& gpt2() {
  static Gpt2Bpe tok(kRoot + "/data/gpt2");
  return tok;
}

const json& fixture_splits() {
  static const json j = json::parse(test::read_bytes(kRoot + "/tests/data/gpt2_fixture.json")).at("splits");
  return j;
}

std::vector<uint16_t> shard_tokens(const std::string& path) {
  MappedShard m(path);
  return std::vector<uint16_t>(m.tokens(), m.tokens() + m.size());
}

int run_tokenize(std::vector<std::string> argv) {
  Args args("tokenize", std::move(argv));
  return cmd_tokenize(args);
}

}  // namespace

TEST_CASE("the tinyshakespeare preset gives ts.train 304,222 and ts.val 33,803 gpt2 tokens, hashed as encoder.py's", "[data][tokenize]") {
  const std::string dir = test::fresh_dir("tokenize_ts");
  json source;
  const auto splits = preset_splits("tinyshakespeare", gpt2(), &source);
  REQUIRE(splits.size() == 2);
  REQUIRE(splits[0].name == "ts.train");
  REQUIRE(splits[0].tokens.size() == 304222);
  REQUIRE(splits[1].tokens.size() == 33803);
  REQUIRE(source.at("sha256") == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed");
  write_token_splits(dir, splits, {{"preset", "tinyshakespeare"}});
  const json manifest = json::parse(test::read_bytes(dir + "/manifest.json"));
  for (const auto& s : splits) {
    INFO("split " << s.name);
    const json& m = manifest.at("shards").at(s.name);
    const auto on_disk = shard_tokens(dir + "/" + m.at("file").get<std::string>());
    REQUIRE(on_disk == s.tokens);
    REQUIRE(m.at("tokens") == s.tokens.size());
    REQUIRE(m.at("sha256") == tokens_sha256(on_disk));
    REQUIRE(m.at("sha256") == fixture_splits().at(s.name).at("sha256"));
  }
}

TEST_CASE("the brown preset splits samples by index mod 10 with end-of-text after each, as encoder.py does", "[data][tokenize]") {
  const auto splits = preset_splits("brown", gpt2());
  REQUIRE(splits.size() == 3);
  for (const auto& s : splits) {
    INFO("split " << s.name);
    REQUIRE(int64_t(s.tokens.size()) == fixture_splits().at(s.name).at("tokens").get<int64_t>());
    REQUIRE(tokens_sha256(s.tokens) == fixture_splits().at(s.name).at("sha256").get<std::string>());
    REQUIRE(s.tokens.back() == 50256);
  }
  REQUIRE(splits[0].tokens.size() == 1026134);
  REQUIRE(splits[1].tokens.size() == 128556);
}

TEST_CASE("byte presets separate brown samples by two newlines and give eval.md's byte counts", "[data][tokenize]") {
  ByteTokenizer bytes;
  const auto brown = preset_splits("brown", bytes);
  REQUIRE(brown[0].tokens.size() == 4785096);
  REQUIRE(brown[1].tokens.size() == 597244);
  const auto ts = preset_splits("tinyshakespeare", bytes);
  REQUIRE(ts[0].tokens.size() == 1115394 * 9 / 10);
  REQUIRE(ts[0].tokens.size() + ts[1].tokens.size() == 1115394);
  REQUIRE_THROWS_WITH(preset_splits("wikitext", bytes), Catch::Contains("unknown preset \"wikitext\""));
}

TEST_CASE("tokenizing a file in small chunks gives exactly the ids of encoding it whole", "[data][tokenize]") {
  const std::string path = kRoot + "/data/tinyshakespeare/input.txt";
  const auto whole = gpt2().encode(test::read_bytes(path));
  for (size_t chunk : {size_t(1000), size_t(4096), size_t(65537)}) {
    DYNAMIC_SECTION("chunk " << chunk) {
      Gpt2Bpe fresh(kRoot + "/data/gpt2");
      std::vector<uint16_t> out;
      tokenize_file(path, fresh, out, nullptr, chunk);
      REQUIRE(std::vector<int32_t>(out.begin(), out.end()) == whole);
    }
  }
  // No safe cut anywhere ("X\nY"): the buffer grows until the end, still exact.
  const std::string dir = test::fresh_dir("tokenize_chunks");
  std::string awkward;
  for (int i = 0; i < 3000; ++i) awkward += i % 7 == 0 ? " \n\n  " : "word ";
  test::write_bytes(dir + "/awkward.txt", awkward);
  std::vector<uint16_t> out;
  tokenize_file(dir + "/awkward.txt", gpt2(), out, nullptr, 512);
  REQUIRE(std::vector<int32_t>(out.begin(), out.end()) == gpt2().encode(awkward));
}

TEST_CASE("hybrid tokenize --input writes train and val shards of at most --shard-tokens and a manifest", "[data][tokenize][cli]") {
  const std::string dir = test::fresh_dir("tokenize_cli");
  test::write_bytes(dir + "/a.txt", "First document.\nIt has two lines.\n");
  test::write_bytes(dir + "/b.txt", "Second one, caf\xC3\xA9 \xF0\x9F\x98\x80 and a stray \xFF byte.");
  REQUIRE(run_tokenize({"--input", dir + "/a.txt", dir + "/b.txt", "--tokenizer", "byte", "--out", dir + "/out",
                        "--val-fraction", "0.25", "--shard-tokens", "20"}) == 0);
  const std::string all = test::read_bytes(dir + "/a.txt") + "\n\n" + test::read_bytes(dir + "/b.txt");
  const auto train = expand_shard_paths({dir + "/out/train_*.bin"}), val = expand_shard_paths({dir + "/out/val_*.bin"});
  std::vector<uint16_t> got;
  for (const auto& p : train) {
    const auto t = shard_tokens(p);
    REQUIRE(t.size() <= 20);
    got.insert(got.end(), t.begin(), t.end());
  }
  const size_t n_val = all.size() / 4;
  REQUIRE(got.size() == all.size() - n_val);
  for (const auto& p : val) {
    const auto t = shard_tokens(p);
    got.insert(got.end(), t.begin(), t.end());
  }
  REQUIRE(std::string(got.begin(), got.end()) == all);
  const json manifest = json::parse(test::read_bytes(dir + "/out/manifest.json"));
  REQUIRE(manifest.at("tokenizer") == "byte");
  REQUIRE(manifest.at("inputs").size() == 2);
  REQUIRE(manifest.at("shards").size() == train.size() + val.size());
  REQUIRE(manifest.at("shards").at("val_000000").at("sha256") == tokens_sha256(shard_tokens(val[0])));

  REQUIRE_THROWS_WITH(run_tokenize({"--out", dir + "/x"}), Catch::Contains("give either --preset or --input"));
  REQUIRE_THROWS_WITH(run_tokenize({"--preset", "brown", "--out", dir + "/x", "--val-fraction", "0.1"}),
                      Catch::Contains("--val-fraction does not apply to --preset"));
  REQUIRE_THROWS_WITH(run_tokenize({"--input", dir + "/a.txt", "--tokenizer", "sentencepiece", "--out", dir + "/x"}),
                      Catch::Contains("unknown tokenizer"));
}
