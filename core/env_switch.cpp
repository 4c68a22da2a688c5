#include "core/env_switch.h"

#include <cstdlib>
#include <cstring>

namespace hyb {

bool env_is_zero(const char* name) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, "0") == 0;
}

}  // namespace hyb
