// The placement rules of intra_hybrid.md 2.2: which of L layers get the special block. Apart from
// the resolver so the arithmetic is checked on its own against the spec's resolved examples; the
// resolver reads the generate object's keys (config.md 3.5) and names the block codes.
//   special_layers({.placement = "middle", .n_layers = 13, .n_special = 2})   // {3, 9}
//   place_codes(13, {3, 9}, "M", "T")                                         // MMMTMMMMMTMMM
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hyb {

struct LayoutRule {
  std::string placement;             // a rule of 2.2: "middle" (= "scatter"), "front", "end", "position", ...
  int64_t n_layers = 0;              // L >= 1
  std::optional<int64_t> n_special;  // n >= 1; "every" derives it
  std::optional<int64_t> position;   // q >= 0, with "position"
  std::optional<int64_t> period;     // P >= 1, with "every"
};

// The special layers, ascending. The rules between keys (n <= L, sandwich's n >= 2, position's
// n = 1 and q < L, every's derived n) fail as ConfigKeyError at the generate object's key
// ("n_special", "position").
std::vector<int64_t> special_layers(const LayoutRule& rule);

// One code per layer: `special` at `layers`, `base` elsewhere. Indices outside [0, n_layers) or
// repeated fail as ConfigKeyError at "placement".
std::vector<std::string> place_codes(int64_t n_layers, const std::vector<int64_t>& layers, const std::string& base,
                                     const std::string& special);

}  // namespace hyb
