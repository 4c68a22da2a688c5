// The data.mqar object (config.md 5, eval.md 4.2 to 4.4): its keys, the presets of eval.md 4.4
// (expanded into the keys they stand for, then written as null), and the generator's constraints
// on every segment.
//   Json m = resolve_mqar(data["mqar"], "data.mqar");   // m["segments"], m["test_segments"], ...
#pragma once
#include "core/config_table.h"

namespace hyb {

extern const KeyTable kMqarKeys;
extern const KeyTable kMqarSegmentKeys;
extern const KeyTable kMqarTestSegmentKeys;

Json resolve_mqar(const Json& mqar, const std::string& path);

// The preset names in table order, and one preset's keys as a data.mqar object (throws hyb::Error
// for an unknown name).
std::vector<std::string> mqar_preset_names();
Json mqar_preset(const std::string& name);

}  // namespace hyb
