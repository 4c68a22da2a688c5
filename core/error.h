// One exception type for everything a user can get wrong, and one for our own broken invariants.
// Usage:
//   HYB_CHECK(x.dim() == 4, "rmsnorm_forward: x must be (B, T, H, D), got ", x.shape());
//   HYB_ASSERT(node.outputs.size() == douts.size());   // "internal error at file:line, please report"
// Both throw; only main() catches, prints the one line and exits non-zero.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include <cstdint>

namespace hyb {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T>
void append_one(std::ostringstream& os, const T& v) { os << v; }
void append_one(std::ostringstream& os, const std::vector<int64_t>& v);
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  append_one(os, v);
  append(os, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<<; vectors of int64 print as shapes "(2, 3)".
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

// A byte count for messages: "512 B", "1.50 MiB", "1.00 PiB".
std::string format_bytes(uint64_t bytes);

[[noreturn]] void throw_internal(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace hyb

#define HYB_CHECK(cond, ...)                                \
  do {                                                      \
    if (!(cond)) throw ::hyb::Error(::hyb::str_cat(__VA_ARGS__)); \
  } while (0)

#define HYB_ASSERT(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) ::hyb::throw_internal(__FILE__, __LINE__, #cond, ::hyb::str_cat(__VA_ARGS__)); \
  } while (0)
