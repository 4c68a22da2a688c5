// `hybrid config show --layers` (config.md 3.7): one line per layer with its index, mixer type,
// mlp width and the keys that differ from the most frequent configuration of its mixer type;
// first the layout's code string when the model was written in the layout form.
//   std::cout << layers_view(rc);
#pragma once
#include <string>

#include "train/config/run_config.h"

namespace hyb {

std::string layers_view(const RunConfig& rc);

}  // namespace hyb
