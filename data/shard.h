// Token shards in llm.c's `.bin` format (config.md 5): a header of 256 little-endian int32
// (magic 20240520, version 1, token count, the rest zero), then the tokens as little-endian
// uint16. Existing llm.c / nanoGPT shards are read as they are. Every reader validates the header
// against the file size, and every error names the file.
//   ShardHeader h = read_shard_header("data/ts/ts.train.bin");   // h.tokens
//   write_shard("out/train_000000.bin", tokens);                  // atomic: .tmp then rename
//   MappedShard m("out/train_000000.bin");  const uint16_t* t = m.tokens();
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hyb {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int64_t kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;
constexpr int64_t kShardMaxTokens = INT32_MAX;  // the header stores the count as int32

struct ShardHeader {
  std::string path;
  int64_t tokens = 0;  // validated: the file holds exactly kShardHeaderBytes + 2 * tokens bytes
};

// Reads and validates the header: magic, version, a non-negative count and the file size.
ShardHeader read_shard_header(const std::string& path);

// Writes header and tokens to path via path.tmp + rename.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// A validated shard mapped read-only into memory (mmap); the mapping lives as long as any copy.
class MappedShard {
 public:
  explicit MappedShard(const std::string& path);
  const std::string& path() const { return header_.path; }
  int64_t size() const { return header_.tokens; }
  const uint16_t* tokens() const { return tokens_; }

 private:
  ShardHeader header_;
  std::shared_ptr<void> mapping_;
  const uint16_t* tokens_ = nullptr;
};

}  // namespace hyb
