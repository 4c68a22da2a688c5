#include "train/run_util.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "data/shard.h"

namespace hyb {

namespace fs = std::filesystem;

std::string tiny_run_dir(const std::string& name, const std::string& phrase, uint64_t seed, int64_t train_tokens,
                         int64_t val_tokens, int noise) {
  const fs::path d = fs::temp_directory_path() / "hybrid_tests" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  RngStream r(seed, "test.tiny_run.shard");
  auto tokens = [&](int64_t n) {
    std::vector<uint16_t> t;
    for (int64_t i = 0; i < n; ++i)
      t.push_back(uint16_t(r.below(uint32_t(noise)) == 0 ? r.below(256) : uint8_t(phrase[size_t(i) % phrase.size()])));
    return t;
  };
  write_shard((d / "train.bin").string(), tokens(train_tokens));
  write_shard((d / "val.bin").string(), tokens(val_tokens));
  return d.string();
}

std::vector<double> metric(const std::string& path, const char* kind, const char* field) {
  std::ifstream in(path);
  HYB_CHECK(in.good(), "metric: cannot read ", path);
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == kind) out.push_back(j[field].get<double>());
  }
  return out;
}

}  // namespace hyb
