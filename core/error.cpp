#include "core/error.h"

#include <cstdio>

namespace hyb {

void detail::append_one(std::ostringstream& os, const std::vector<int64_t>& v) {
  os << '(';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << (v.size() == 1 ? ",)" : ")");
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return str_cat(bytes, " B");
  double v = double(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(str_cat("internal error at ", file, ":", line, ": ", cond, msg.empty() ? "" : ": ", msg,
                      " (please report)"));
}

}  // namespace hyb
