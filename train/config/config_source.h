// Where a config value was written (config.md 8.2's SOURCE and PATH): the config file, or --set for
// a path that a command-line assignment wrote (or lies inside one).
//   SourceMap src{"configs/x.json"};  src.add_set("train.optimizer.lr");
//   src.source_of("train.optimizer.lr")  // "--set"
#pragma once
#include <string>
#include <vector>

#include "core/config_error.h"

namespace hyb {

struct Origin {
  std::string source;  // "configs/x.json" or "--set"
  std::string path;    // as written: "model.block.mixer.window", "model.overrides[0].mixer.window"
  bool operator==(const Origin&) const = default;
};

class SourceMap {
 public:
  explicit SourceMap(std::string file) : file_(std::move(file)) {}
  void add_set(const std::string& concrete_path) { set_paths_.push_back(concrete_path); }
  std::string source_of(const std::string& path) const {
    for (const std::string& p : set_paths_)
      if (path_within(path, p)) return "--set";
    return file_;
  }
  Origin origin(const std::string& path) const { return {source_of(path), path}; }

 private:
  std::string file_;
  std::vector<std::string> set_paths_;
};

}  // namespace hyb
