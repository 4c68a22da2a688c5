// Config paths and selectors (config.md 4.1): `model.layers[6::8].mixer.window`, with Python's
// meaning for indices and slices. Selectors pick list elements for --set paths and for the
// `layers` of an override.
//   auto p = parse_config_path("model.layers[0:4,20:].mixer.window");   // nullopt on a syntax error
//   std::vector<int64_t> i = select_indices(p->steps[2].selector, 24, SelectorTarget::layers, "...");
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config_error.h"

namespace hyb {

struct SelectorItem {
  bool slice = false;
  int64_t index = 0;                    // !slice
  std::optional<int64_t> start, stop;  // slice; absent bounds are the list's ends
  int64_t step = 1;                     // slice; 0 is parsed and refused when picking
};

struct Selector {
  std::string text;  // as written, for messages
  bool all = false;  // "*"
  std::vector<SelectorItem> items;
};

struct PathStep {
  bool is_key = true;
  std::string key;    // is_key
  Selector selector;  // !is_key
};

struct ConfigPath {
  std::string text;
  std::vector<PathStep> steps;
  // True when the path starts with the keys `a`, `b` (component-wise: model.layers, not model.layers_x).
  bool starts_with(std::string_view a, std::string_view b) const;
};

std::optional<Selector> parse_selector(std::string_view text);
std::optional<ConfigPath> parse_config_path(std::string_view text);

// What a selector picks from: model.layers (messages speak of layers and the model) or any list.
enum class SelectorTarget { layers, list };

// The indices a selector picks from a list of n, in selector order. Throws ConfigKeyError at `path`
// for an index outside the list, a step of 0, an empty pick or an element picked twice.
std::vector<int64_t> select_indices(const Selector& s, int64_t n, SelectorTarget target, const std::string& path);
// An override's `layers`: a selector string without brackets or a list of indices (a bare index,
// as `--set model.overrides[0].layers=3` writes it, counts as a list of one).
std::vector<int64_t> select_layers(const Json& value, int64_t num_layers, const std::string& path);

// Layer indices in selector syntax with runs of three or more as a:b: "0:6,7:14,23"; "*" for all.
std::string format_layer_selector(const std::vector<int64_t>& sorted_indices, int64_t num_layers);

}  // namespace hyb
