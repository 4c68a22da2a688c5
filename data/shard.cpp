// llm.c `.bin` shards: header validation, atomic writes, read-only memory maps.
// The header and tokens are copied as raw bytes, so the host must be little-endian (checked at
// compile time) and the format needs no byte swapping.
#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/safetensors.h"

namespace hyb {

static_assert(std::endian::native == std::endian::little, "shards are read and written as raw little-endian bytes");

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Validates the header of an open file; `size` is the file size in bytes.
ShardHeader validate_header(const std::string& path, const int32_t* h, int64_t size) {
  HYB_CHECK(h[0] == kShardMagic, path, ": not a token shard: magic number is ", h[0], ", expected ", kShardMagic,
            " (llm.c .bin format)");
  HYB_CHECK(h[1] == kShardVersion, path, ": shard version is ", h[1], ", expected ", kShardVersion,
            " (uint16 tokens)");
  HYB_CHECK(h[2] >= 0, path, ": header token count is negative (", h[2], ")");
  const int64_t expected = kShardHeaderBytes + 2 * int64_t(h[2]);
  HYB_CHECK(size == expected, path, ": header says ", h[2], " tokens (", expected, " bytes with the header) but the file has ",
            size, " bytes", size < expected ? " (truncated?)" : "");
  return ShardHeader{path, h[2]};
}

int64_t open_and_size(const std::string& path, Fd& f) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HYB_CHECK(f.fd >= 0, path, ": cannot open token shard: ", std::strerror(errno));
  struct stat st {};
  HYB_CHECK(::fstat(f.fd, &st) == 0, path, ": cannot stat: ", std::strerror(errno));
  HYB_CHECK(S_ISREG(st.st_mode), path, ": not a regular file");
  HYB_CHECK(st.st_size >= kShardHeaderBytes, path, ": too small for a token shard: ", st.st_size, " bytes, the header alone is ",
            kShardHeaderBytes);
  return st.st_size;
}

}  // namespace

ShardHeader read_shard_header(const std::string& path) {
  Fd f;
  const int64_t size = open_and_size(path, f);
  int32_t h[kShardHeaderInts];
  HYB_CHECK(::pread(f.fd, h, kShardHeaderBytes, 0) == kShardHeaderBytes, path, ": cannot read the shard header: ",
            std::strerror(errno));
  return validate_header(path, h, size);
}

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  HYB_CHECK(int64_t(tokens.size()) <= kShardMaxTokens, path, ": ", tokens.size(), " tokens do not fit one shard (at most ",
            kShardMaxTokens, ")");
  int32_t h[kShardHeaderInts] = {};
  h[0] = kShardMagic;
  h[1] = kShardVersion;
  h[2] = int32_t(tokens.size());
  std::string bytes(size_t(kShardHeaderBytes) + 2 * tokens.size(), '\0');
  std::memcpy(bytes.data(), h, kShardHeaderBytes);
  if (!tokens.empty()) std::memcpy(bytes.data() + kShardHeaderBytes, tokens.data(), 2 * tokens.size());
  write_file_atomic(path, bytes);
}

MappedShard::MappedShard(const std::string& path) {
  Fd f;
  const int64_t size = open_and_size(path, f);
  void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, f.fd, 0);
  HYB_CHECK(p != MAP_FAILED, path, ": cannot memory-map: ", std::strerror(errno));
  mapping_ = std::shared_ptr<void>(p, [size](void* q) { ::munmap(q, size_t(size)); });
  header_ = validate_header(path, static_cast<const int32_t*>(p), size);
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(p) + kShardHeaderBytes);
}

}  // namespace hyb
