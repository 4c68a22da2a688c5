// The per-layer summary. Layers are compared with the most frequent configuration of their own
// mixer type (ties: the first), so a hybrid model lists what sets its attention layers apart from
// each other rather than every key that attention and the other family do not share.
#include "train/config/config_layers_view.h"

#include <map>

namespace hyb {

std::string layers_view(const RunConfig& rc) {
  const Json& layers = rc.resolved.at("model").at("layers");
  std::string out;
  if (!rc.layout_codes.empty()) {
    bool single = true;
    for (const std::string& c : rc.layout_codes) single = single && c.size() == 1;
    std::string codes;
    for (const std::string& c : rc.layout_codes) codes += str_cat(single || codes.empty() ? "" : " ", c);
    out += str_cat("layout: ", codes, "\n");
  }

  // The reference of each type: the most frequent layer configuration, the first among equals.
  std::map<std::string, size_t> reference;
  {
    std::map<std::string, std::pair<size_t, size_t>> best;  // type -> (count, first index)
    std::map<std::string, std::pair<size_t, size_t>> seen;  // dump -> (count, first index)
    for (size_t i = 0; i < layers.size(); ++i) {
      auto& s = seen[layers[i].dump()];
      if (s.first++ == 0) s.second = i;
    }
    for (const auto& [text, s] : seen) {
      const std::string type = layers[s.second]["mixer"]["type"].get<std::string>();
      auto it = best.find(type);
      if (it == best.end() || s.first > it->second.first || (s.first == it->second.first && s.second < it->second.second))
        best[type] = s;
    }
    for (const auto& [type, s] : best) reference[type] = s.second;
  }

  size_t type_width = 0;
  for (const Json& l : layers) type_width = std::max(type_width, l["mixer"]["type"].get<std::string>().size());
  const size_t index_width = std::to_string(layers.size() - 1).size();
  for (size_t i = 0; i < layers.size(); ++i) {
    const Json& l = layers[i];
    const std::string type = l["mixer"]["type"].get<std::string>();
    const Json& ref = layers[reference[type]];
    std::string index = std::to_string(i), width = l["mlp"]["type"] == "none" ? "none" : l["mlp"]["intermediate_size"].dump();
    std::string line = str_cat(std::string(index_width - index.size(), ' '), index, "  ", type,
                               std::string(type_width - type.size(), ' '), "  mlp ", width);
    for (const char* part : {"mixer", "mlp"})
      for (const auto& [k, v] : l[part].items())
        if (!ref[part].contains(k) || ref[part][k] != v)
          line += str_cat("  ", std::string_view(part) == "mlp" ? "mlp." : "", k, "=", v.dump());
    out += line + "\n";
  }
  return out;
}

}  // namespace hyb
