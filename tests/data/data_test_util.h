// Helpers shared by the data tests: a fresh scratch directory, random token ids, raw file bytes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/rng.h"

namespace hyb::test {

inline std::string fresh_dir(const std::string& name) {
  std::filesystem::path d = std::filesystem::temp_directory_path() / "hybrid_tests" / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

inline std::vector<uint16_t> random_tokens(int64_t n, uint32_t vocab, uint64_t seed) {
  RngStream r(seed, "test.tokens");
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = uint16_t(r.below(vocab));
  return t;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace hyb::test
