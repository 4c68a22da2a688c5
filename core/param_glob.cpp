#include "core/param_glob.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>

namespace hyb {

Json check_param_glob(const Json& v, const std::string& path) {
  const std::string glob = v.is_string() ? v.get<std::string>() : std::string();
  const bool ok = !glob.empty() && std::all_of(glob.begin(), glob.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '*' || c == '?';
  });
  if (!ok) throw ConfigKeyError(path, expected_problem("a glob of parameter names (letters, digits, _, ., * and ?)", v));
  return v;
}

bool param_glob_matches(const std::string& glob, const std::string& name) {
  return ::fnmatch(glob.c_str(), name.c_str(), 0) == 0;
}

}  // namespace hyb
