// The mlp object of a block (config.md 3.4): SwiGLU or none, and the hidden width given directly,
// as an expansion of d_model, or derived by the 8/3 rule of attention.md 7 rounded to multiple_of.
//   resolve_mlp_config(mlp, d_model);                // in place; paths relative to the mlp object
//   MlpConfig c = mlp_config_from_json(mlp);        // c.intermediate_size
#pragma once
#include <optional>
#include <string>

#include "core/config_table.h"

namespace hyb {

struct MlpConfig {
  std::string type = "swiglu";    // "swiglu" | "none"
  int64_t intermediate_size = 0;  // 0 with type "none"
  std::optional<double> expansion;
  int64_t multiple_of = 0;        // 0 with type "none"
};

extern const KeyTable kMlpKeys;

// The hidden width of config.md 3.4 for a null intermediate_size.
int64_t derived_intermediate_size(int64_t d_model, std::optional<double> expansion, int64_t multiple_of);

void resolve_mlp_config(Json& mlp, int64_t d_model);
MlpConfig mlp_config_from_json(const Json& mlp);

}  // namespace hyb
