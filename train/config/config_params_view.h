// `hybrid config show --params` (config.md 3.7): the parameters of the model a resolved config
// describes, one line each with its shape, size, weight decay and lr multiplier (config.md 6.3),
// then the totals. The model is built on the CPU without initial values: names and shapes only.
//   std::cout << params_view(rc);
#pragma once
#include <string>

#include "train/config/run_config.h"

namespace hyb {

std::string params_view(const RunConfig& rc);

}  // namespace hyb
