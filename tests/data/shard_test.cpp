#include <catch2/catch.hpp>

#include <cstring>

#include "data/data_test_util.h"
#include "data/shard.h"

using namespace hyb;
using namespace hyb::test;

TEST_CASE("a written shard reads back with the same tokens through the header reader and the memory map", "[data][shard]") {
  const std::string dir = fresh_dir("shard_roundtrip");
  for (int64_t n : {0, 1, 7, 50257}) {
    const std::string path = dir + "/s" + std::to_string(n) + ".bin";
    const auto tokens = random_tokens(n, 50257, uint64_t(n) + 11);
    write_shard(path, tokens);
    REQUIRE(read_shard_header(path).tokens == n);
    REQUIRE(read_bytes(path).size() == size_t(kShardHeaderBytes + 2 * n));
    MappedShard m(path);
    REQUIRE(m.size() == n);
    REQUIRE(std::vector<uint16_t>(m.tokens(), m.tokens() + n) == tokens);
  }
}

TEST_CASE("a hand-made llm.c shard written byte by byte is read as it is", "[data][shard]") {
  // The header llm.c's dev/data scripts write: int32 magic, version, count, 253 zero ints.
  std::string bytes(1024, '\0');
  const unsigned char magic[4] = {0x88, 0xD8, 0x34, 0x01};  // 20240520 little-endian
  const unsigned char version[4] = {0x01, 0x00, 0x00, 0x00};
  const unsigned char count[4] = {0x03, 0x00, 0x00, 0x00};
  std::memcpy(&bytes[0], magic, 4);
  std::memcpy(&bytes[4], version, 4);
  std::memcpy(&bytes[8], count, 4);
  // Tokens 15496 ("Hello"), 995 (" world"), 50256 (<|endoftext|>) as little-endian uint16.
  const unsigned char tokens[6] = {0x88, 0x3C, 0xE3, 0x03, 0x50, 0xC4};
  bytes.append(reinterpret_cast<const char*>(tokens), 6);
  const std::string path = fresh_dir("shard_llmc") + "/llmc.bin";
  write_bytes(path, bytes);
  REQUIRE(read_shard_header(path).tokens == 3);
  MappedShard m(path);
  REQUIRE(std::vector<uint16_t>(m.tokens(), m.tokens() + 3) == std::vector<uint16_t>{15496, 995, 50256});
  // And our writer produces exactly those bytes.
  write_shard(path, {15496, 995, 50256});
  REQUIRE(read_bytes(path) == bytes);
}

TEST_CASE("corrupt shard headers are refused with the file named", "[data][shard]") {
  const std::string dir = fresh_dir("shard_corrupt");
  const std::string good_path = dir + "/good.bin";
  write_shard(good_path, random_tokens(10, 50257, 5));
  const std::string good = read_bytes(good_path);
  auto corrupt = [&](const std::string& name, auto edit) {
    std::string b = good;
    edit(b);
    const std::string p = dir + "/" + name;
    write_bytes(p, b);
    return p;
  };
  auto set_int = [](std::string& b, int index, int32_t v) { std::memcpy(&b[size_t(index) * 4], &v, 4); };

  SECTION("bad magic") {
    const auto p = corrupt("magic.bin", [&](std::string& b) { set_int(b, 0, 20240519); });
    REQUIRE_THROWS_WITH(read_shard_header(p), Catch::Contains(p) && Catch::Contains("magic number is 20240519"));
    REQUIRE_THROWS_WITH(MappedShard(p), Catch::Contains(p) && Catch::Contains("magic"));
  }
  SECTION("unsupported version") {
    const auto p = corrupt("version.bin", [&](std::string& b) { set_int(b, 1, 2); });
    REQUIRE_THROWS_WITH(read_shard_header(p), Catch::Contains(p) && Catch::Contains("version is 2"));
  }
  SECTION("count larger than the file") {
    const auto p = corrupt("count.bin", [&](std::string& b) { set_int(b, 2, 11); });
    REQUIRE_THROWS_WITH(read_shard_header(p), Catch::Contains(p) && Catch::Contains("header says 11 tokens") &&
                                                  Catch::Contains("truncated"));
  }
  SECTION("trailing bytes after the tokens") {
    const auto p = corrupt("trailing.bin", [&](std::string& b) { b.push_back('\x07'); });
    REQUIRE_THROWS_WITH(MappedShard(p), Catch::Contains(p) && Catch::Contains("the file has 1045 bytes"));
  }
  SECTION("negative count") {
    const auto p = corrupt("negative.bin", [&](std::string& b) { set_int(b, 2, -4); });
    REQUIRE_THROWS_WITH(read_shard_header(p), Catch::Contains(p) && Catch::Contains("negative"));
  }
  SECTION("shorter than a header") {
    const auto p = corrupt("short.bin", [&](std::string& b) { b.resize(100); });
    REQUIRE_THROWS_WITH(read_shard_header(p), Catch::Contains(p) && Catch::Contains("too small"));
  }
  SECTION("missing file") {
    REQUIRE_THROWS_WITH(read_shard_header(dir + "/absent.bin"), Catch::Contains(dir + "/absent.bin"));
  }
}
