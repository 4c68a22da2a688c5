// Strict JSON for run configs (config.md 1, 8.2): a duplicate key is an error naming its path, and
// a syntax error reads "FILE:LINE:COLUMN: invalid JSON: <the parser's message>".
//   Json cfg = read_config_file("configs/quickstart.json");
//   Json v = parse_config_json(text, "configs/x.json");
#pragma once
#include <string>

#include "core/config_error.h"

namespace hyb {

// Throws hyb::Error: "SOURCE:LINE:COLUMN: invalid JSON: ..." or "SOURCE: PATH: duplicate key".
Json parse_config_json(const std::string& text, const std::string& source);
Json read_config_file(const std::string& path);

// The duplicate-key check alone, for text that is already known to be valid JSON (a --set value):
// throws ConfigKeyError with the path of the duplicate below `path`.
Json parse_json_no_duplicates(const std::string& text, const std::string& path);

}  // namespace hyb
