// Glob expansion with fnmatch over one directory listing; sorted with std::string's byte order
// rather than glob(3)'s locale collation, so the order does not depend on LANG.
#include "data/shard_glob.h"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace hyb {

std::vector<std::string> expand_shard_paths(const std::vector<std::string>& patterns) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const std::string& pattern : patterns) {
    const size_t slash = pattern.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : pattern.substr(0, slash);
    const std::string name = slash == std::string::npos ? pattern : pattern.substr(slash + 1);
    HYB_CHECK(dir.find_first_of("*?[") == std::string::npos, pattern,
              ": a glob may use *, ? and [...] in its last path component only");
    if (name.find_first_of("*?[") == std::string::npos) {
      out.push_back(pattern);
      continue;
    }
    std::error_code ec;
    std::vector<std::string> matches;
    for (const auto& e : fs::directory_iterator(dir.empty() ? fs::path(".") : fs::path(dir), ec)) {
      const std::string n = e.path().filename().string();
      if (::fnmatch(name.c_str(), n.c_str(), FNM_PERIOD) == 0 && !e.is_directory()) matches.push_back(n);
    }
    HYB_CHECK(!ec, pattern, ": cannot list ", dir.empty() ? "." : dir, ": ", ec.message());
    HYB_CHECK(!matches.empty(), pattern, ": the pattern matches no file");
    std::sort(matches.begin(), matches.end());
    for (const std::string& m : matches) out.push_back(dir.empty() ? m : dir + "/" + m);
  }
  return out;
}

}  // namespace hyb
