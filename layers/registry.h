// Every layer family, one line each in layers/registry.cpp (an explicit table: the linker would
// drop self-registering objects from a static library, and a table reads as the list of what exists).
// An entry names the config's `mixer.type`, builds the family's mixer from a resolved mixer object,
// resolves a mixer object as written (defaults, derived values, the family's rules; config.md 3.3,
// 3.6 step 6), and holds the family's key table (docs/configs.md is generated from it).
//   const LayerEntry* e = find_layer("attention");
//   e->resolve_config(mixer, ctx);   // throws ConfigKeyError with paths relative to the mixer
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config_table.h"
#include "layers/layer_config.h"
#include "layers/block.h"

namespace hyb {

struct LayerEntry {
  const char* type;  // the config's mixer.type
  // Builds the mixer of a standard block; null for a family that builds its whole block.
  std::unique_ptr<Mixer> (*make_mixer)(const nlohmann::json& mixer, const MixerContext& ctx);
  // Checks `mixer` (its `type` already matches) and replaces it by the resolved object: every key
  // of the family in table order, defaults filled, derived values written out.
  void (*resolve_config)(Json& mixer, const LayerConfigContext& ctx);
  const KeyTable* keys;
  // A family that replaces the block equations (config.md 3.2: pha) builds the block itself.
  std::unique_ptr<Block> (*make_block)(const LayerSpec& spec, const BlockContext& ctx) = nullptr;
};

std::span<const LayerEntry> layer_entries();
const LayerEntry* find_layer(std::string_view type);  // nullptr when unknown
std::vector<std::string> layer_types();               // sorted

}  // namespace hyb
