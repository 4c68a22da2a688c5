#include "layers/layer_config.h"

namespace hyb {

KeySpec mixer_d_model_key() {
  return {.name = "d_model", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
          .default_doc = "null: model.d_model", .doc = "input and output width; must equal model.d_model"};
}

void resolve_mixer_d_model(Json& m, const LayerConfigContext& ctx) {
  if (m["d_model"].is_null()) m["d_model"] = ctx.d_model;
  if (json_int(m["d_model"]) != ctx.d_model)
    throw ConfigKeyError("d_model", expected_problem(str_cat("null or model.d_model (", ctx.d_model, ")"), m["d_model"]));
}

Json check_chunk_size_16_32_64(const Json& v, const std::string& path) {
  const int64_t c = json_int(v);
  if (c != 16 && c != 32 && c != 64) throw ConfigKeyError(path, expected_problem("16, 32 or 64", v));
  return v;
}

}  // namespace hyb
