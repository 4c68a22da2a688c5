#include "config_test_util.h"

#include "core/rng.h"
#include "data/shard.h"

namespace hyb::config_test {

void ScratchDir::shard(const std::string& path, int64_t n, uint64_t seed) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  RngStream g(seed, "config_test.shard");
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = uint16_t(g.below(50257));
  write_shard(path, tokens);
}

}  // namespace hyb::config_test
