// The mlp keys of config.md 3.4. An explicit intermediate_size is taken as given (multiple_of only
// rounds a derived width); given together with expansion the two must agree (config.md 2.4).
#include "layers/mlp/mlp_config.h"

#include <cmath>

namespace hyb {

const KeyTable kMlpKeys{"mlp", nullptr, {
    {.name = "type", .type = KeyType::enumeration, .default_value = "swiglu", .values = {"swiglu", "none"},
     .doc = "SwiGLU without biases (attention.md 7); \"none\": no MLP sublayer and no MLP norm"},
    {.name = "intermediate_size", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: derived", .doc = "hidden width; derived as multiple_of * ceil(base / multiple_of), base = floor(8 d_model / 3) or floor(expansion d_model + 1e-6)"},
    {.name = "expansion", .type = KeyType::number, .null = Null::off, .range = Range::above(0),
     .doc = "hidden width relative to d_model"},
    {.name = "multiple_of", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: 256 without expansion, 1 with it", .doc = "a derived hidden width is rounded up to a multiple of this"},
}};

int64_t derived_intermediate_size(int64_t d_model, std::optional<double> expansion, int64_t multiple_of) {
  const int64_t base = expansion ? int64_t(std::floor(*expansion * double(d_model) + 1e-6)) : 8 * d_model / 3;
  return multiple_of * ((base + multiple_of - 1) / multiple_of);
}

void resolve_mlp_config(Json& mlp, int64_t d_model) {
  Json m = apply_key_table(kMlpKeys, mlp, "");
  if (m["type"] == "none") {
    for (const char* key : {"intermediate_size", "expansion", "multiple_of"})
      if (!m[key].is_null()) throw ConfigKeyError(key, cannot_be_used_problem("mlp type is \"none\""));
    mlp = std::move(m);
    return;
  }
  std::optional<double> expansion;
  if (!m["expansion"].is_null()) expansion = m["expansion"].get<double>();
  if (m["multiple_of"].is_null()) m["multiple_of"] = expansion ? 1 : 256;
  const int64_t multiple_of = json_int(m["multiple_of"]);
  if (m["intermediate_size"].is_null()) {
    m["intermediate_size"] = derived_intermediate_size(d_model, expansion, multiple_of);
  } else if (expansion) {
    const int64_t want = derived_intermediate_size(d_model, expansion, multiple_of);
    if (json_int(m["intermediate_size"]) != want)
      throw ConfigKeyError("intermediate_size",
                           expected_problem(str_cat(want, " (expansion ", m["expansion"].dump(), " x d_model ", d_model,
                                                    ", rounded up to a multiple of ", multiple_of, ")"),
                                            m["intermediate_size"]) +
                               " (give one of intermediate_size and expansion, or set the other to null)");
  }
  mlp = std::move(m);
}

MlpConfig mlp_config_from_json(const Json& m) {
  MlpConfig c;
  c.type = m.at("type").get<std::string>();
  if (c.type == "none") return c;
  c.intermediate_size = json_int(m.at("intermediate_size"));
  if (!m.at("expansion").is_null()) c.expansion = m.at("expansion").get<double>();
  c.multiple_of = json_int(m.at("multiple_of"));
  return c;
}

}  // namespace hyb
