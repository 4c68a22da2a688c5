// nlohmann::json (a std::map per object) sorts keys with std::string's comparison, which compares
// chars as unsigned: UTF-8 byte order. Its dump() writes integers in decimal and doubles in the
// shortest form that reads back to the same double, as config.md 9 asks.
#include "train/config/config_hash.h"

#include "core/sha256.h"

namespace hyb {

std::string canonical_config_text(const Json& resolved) {
  Json c = resolved;
  c.erase("name");
  if (c.contains("train") && c["train"].is_object())
    for (const char* k : {"out_dir", "log_interval", "checkpoint_interval", "keep_last", "data_parallel"}) c["train"].erase(k);
  return nlohmann::json(c).dump();  // the conversion to std::map objects sorts the keys
}

std::string config_sha256(const Json& resolved) { return sha256_hex(canonical_config_text(resolved)); }

}  // namespace hyb
