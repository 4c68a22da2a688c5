// Shard paths and globs of data.train / data.val (config.md 5): `*`, `?` and `[...]` may appear in
// the last path component only; matches are taken in byte order of their names; a pattern that
// matches nothing is an error naming it. A list keeps its order; a plain path is passed through.
//   expand_shard_paths({"data/fineweb/train_*.bin"})  // {"data/fineweb/train_000001.bin", ...}
#pragma once
#include <string>
#include <vector>

namespace hyb {

std::vector<std::string> expand_shard_paths(const std::vector<std::string>& patterns);

// One pattern: its matches in byte order (empty when none, also when its directory does not
// exist), or the path itself when it has no wildcard. Throws only for wildcards outside the last
// component or an unreadable directory.
std::vector<std::string> match_shard_pattern(const std::string& pattern);

}  // namespace hyb
