#include "core/fault.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hyb {

void fault_point(const char* name) {
  static const std::string spec = [] {
    const char* e = std::getenv("HYBRID_FAULT");
    return std::string(e ? e : "");
  }();
  static int hits = 0;
  if (spec.empty()) return;
  const size_t colon = spec.rfind(':');
  const std::string want = spec.substr(0, colon);
  const int at = colon == std::string::npos ? 1 : std::atoi(spec.c_str() + colon + 1);
  if (want == name && ++hits == at) std::raise(SIGKILL);
}

}  // namespace hyb
