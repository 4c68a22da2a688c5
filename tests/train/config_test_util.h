// Helpers of the config tests: resolve a config written inline, catch the one-line error, and
// write token shards into a scratch directory that the test runs in.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "train/config/config_json.h"
#include "train/config/config_resolve.h"

namespace hyb::config_test {

// Resolves `text` as the file `source`, CPU-only and without reading shards unless `files`.
inline RunConfig resolve(const std::string& text, const std::vector<std::string>& sets = {},
                         const std::string& source = "configs/x.json", ResolveOptions options = {}) {
  if (options.cuda_devices < 0) options.cuda_devices = 0;
  std::vector<Assignment> a;
  for (const std::string& s : sets) a.push_back(parse_assignment(s));
  return resolve_run_config(parse_config_json(text, source), source, a, options);
}

inline RunConfig resolve_no_files(const std::string& text, const std::vector<std::string>& sets = {},
                                  const std::string& source = "configs/x.json") {
  ResolveOptions o;
  o.check_files = false;
  return resolve(text, sets, source, o);
}

// The message of the error that resolving throws, or "" when it resolves.
inline std::string error_of(const std::string& text, const std::vector<std::string>& sets = {},
                            const std::string& source = "configs/x.json", ResolveOptions options = {}) {
  try {
    resolve(text, sets, source, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline std::string error_no_files(const std::string& text, const std::vector<std::string>& sets = {},
                                  const std::string& source = "configs/x.json") {
  ResolveOptions o;
  o.check_files = false;
  return error_of(text, sets, source, o);
}

// Runs the test body in a fresh directory (relative shard paths as in the spec's messages) and
// returns to the previous one afterwards.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) : previous_(std::filesystem::current_path()) {
    dir_ = std::filesystem::temp_directory_path() / "hybrid_tests" / name;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::filesystem::current_path(dir_);
  }
  ~ScratchDir() { std::filesystem::current_path(previous_); }
  // A shard of n random tokens below 50257.
  void shard(const std::string& path, int64_t n, uint64_t seed = 1);

 private:
  std::filesystem::path previous_, dir_;
};

}  // namespace hyb::config_test
