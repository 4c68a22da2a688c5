#include "core/error.h"

namespace hyb {

void detail::append_one(std::ostringstream& os, const std::vector<int64_t>& v) {
  os << '(';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << (v.size() == 1 ? ",)" : ")");
}

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(str_cat("internal error at ", file, ":", line, ": ", cond, msg.empty() ? "" : ": ", msg,
                      " (please report)"));
}

}  // namespace hyb
