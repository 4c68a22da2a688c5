// config_sha256 (config.md 9): SHA-256 of the canonical text of a resolved config, which leaves
// out the bookkeeping keys (name, train.out_dir, log_interval, checkpoint_interval, keep_last,
// data_parallel) and sorts every object's keys by their UTF-8 bytes, without whitespace.
//   std::string hex = config_sha256(resolved);
#pragma once
#include <string>

#include "core/config_error.h"

namespace hyb {

std::string canonical_config_text(const Json& resolved);
std::string config_sha256(const Json& resolved);

}  // namespace hyb
