#include "core/device.h"

#include <charconv>

#include "core/current_device.h"
#include "core/error.h"

namespace hyb {

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.substr(0, 5) == "cuda:") {
    int i = -1;
    auto tail = s.substr(5);
    auto [p, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), i);
    if (ec == std::errc() && p == tail.data() + tail.size() && i >= 0) return cuda(i);
  }
  throw Error(str_cat("expected a device \"cpu\", \"cuda\" or \"cuda:N\", got \"", s, "\""));
}

std::string Device::str() const { return is_cpu() ? "cpu" : str_cat("cuda:", index); }

}  // namespace hyb

#if !HYBRID_CUDA
namespace hyb {
int cuda_device_count() { return 0; }
void make_current(Device d) {
  if (d.is_cuda()) throw Error(str_cat(d.str(), " requested, but this build has no CUDA backend"));
}
}  // namespace hyb
#endif
