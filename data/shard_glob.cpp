// Glob expansion with fnmatch over one directory listing; sorted with std::string's byte order
// rather than glob(3)'s locale collation, so the order does not depend on LANG.
#include "data/shard_glob.h"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace hyb {

std::vector<std::string> match_shard_pattern(const std::string& pattern) {
  namespace fs = std::filesystem;
  const size_t slash = pattern.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : pattern.substr(0, slash);
  const std::string name = slash == std::string::npos ? pattern : pattern.substr(slash + 1);
  HYB_CHECK(dir.find_first_of("*?[") == std::string::npos, pattern,
            ": a glob may use *, ? and [...] in its last path component only");
  if (name.find_first_of("*?[") == std::string::npos) return {pattern};
  std::error_code ec;
  if (!fs::is_directory(dir.empty() ? fs::path(".") : fs::path(dir), ec)) return {};  // nothing can match
  std::vector<std::string> matches;
  for (const auto& e : fs::directory_iterator(dir.empty() ? fs::path(".") : fs::path(dir), ec)) {
    const std::string n = e.path().filename().string();
    if (::fnmatch(name.c_str(), n.c_str(), FNM_PERIOD) == 0 && !e.is_directory()) matches.push_back(n);
  }
  HYB_CHECK(!ec, pattern, ": cannot list ", dir.empty() ? "." : dir, ": ", ec.message());
  std::sort(matches.begin(), matches.end());
  for (std::string& m : matches) m = dir.empty() ? m : dir + "/" + m;
  return matches;
}

std::vector<std::string> expand_shard_paths(const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  for (const std::string& pattern : patterns) {
    std::vector<std::string> matches = match_shard_pattern(pattern);
    HYB_CHECK(!matches.empty(), pattern, ": the pattern matches no file");
    out.insert(out.end(), matches.begin(), matches.end());
  }
  return out;
}

}  // namespace hyb
