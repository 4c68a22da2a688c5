// Every layer family, one line each in layers/registry.cpp (an explicit table: the linker would
// drop self-registering objects from a static library, and a table reads as the list of what exists).
#pragma once
#include <string>
#include <vector>

#include "layers/mixer.h"

namespace hyb {

struct LayerEntry {
  const char* type;  // the config's mixer.type
  std::unique_ptr<Mixer> (*make_mixer)(const nlohmann::json& mixer, const MixerContext& ctx);
};

const LayerEntry* find_layer(const std::string& type);  // nullptr when unknown
std::vector<std::string> layer_types();                 // sorted

}  // namespace hyb
