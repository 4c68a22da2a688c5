// SHA-256 (FIPS 180-4), for the config hash (config.md 9) and shard manifests (eval.md 1.1).
//   Sha256 h; h.update(bytes); std::string hex = h.hex_digest();   or   sha256_hex(text)
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hyb {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<uint8_t, 32> digest();  // finishes the hash; call once
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace hyb
