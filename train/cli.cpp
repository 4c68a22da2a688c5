#include "train/cli.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/error.h"

namespace hyb {

std::string hybrid_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  HYB_CHECK(n > 0, "cannot find the hybrid executable (/proc/self/exe): ", std::strerror(errno));
  return std::string(buf, size_t(n));
}

size_t Args::end() const {
  for (size_t i = 0; i < argv_.size(); ++i)
    if (argv_[i] == "--") return i;
  return argv_.size();
}

std::optional<std::string> Args::get(const std::string& name) {
  std::optional<std::string> found;
  const size_t n = end();
  for (size_t i = 0; i < n; ++i) {
    const std::string& a = argv_[i];
    if (a == name) {
      HYB_CHECK(i + 1 < n, command_, ": option ", name, " needs a value");
      used_[i] = used_[i + 1] = true;
      found = argv_[i + 1];
      ++i;
    } else if (a.rfind(name + "=", 0) == 0) {
      used_[i] = true;
      found = a.substr(name.size() + 1);
    }
  }
  return found;
}

std::string Args::value(const std::string& name) {
  auto v = get(name);
  HYB_CHECK(v, command_, ": missing required option ", name);
  return *v;
}

std::string Args::value(const std::string& name, const std::string& fallback) { return get(name).value_or(fallback); }

double Args::parse_number(const std::string& name, const std::string& text) const {
  try {
    size_t pos = 0;
    double d = std::stod(text, &pos);
    if (pos == text.size()) return d;
  } catch (const std::exception&) {
  }
  throw Error(str_cat(command_, ": option ", name, ": expected a number, got \"", text, "\""));
}

int64_t Args::parse_integer(const std::string& name, const std::string& text) const {
  int64_t x = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  HYB_CHECK(ec == std::errc() && p == text.data() + text.size(), command_, ": option ", name, ": expected an integer, got \"",
            text, "\"");
  return x;
}

double Args::number(const std::string& name, double fallback) {
  auto v = get(name);
  return v ? parse_number(name, *v) : fallback;
}

int64_t Args::integer(const std::string& name, int64_t fallback) {
  auto v = get(name);
  return v ? parse_integer(name, *v) : fallback;
}

std::vector<double> Args::numbers(const std::string& name) {
  std::vector<double> out;
  for (const std::string& v : values(name)) out.push_back(parse_number(name, v));
  return out;
}

std::vector<int64_t> Args::integers(const std::string& name) {
  std::vector<int64_t> out;
  for (const std::string& v : values(name)) out.push_back(parse_integer(name, v));
  return out;
}

std::vector<std::string> Args::values(const std::string& name) {
  std::vector<std::string> out;
  const size_t n = end();
  for (size_t i = 0; i < n; ++i) {
    const std::string& a = argv_[i];
    if (a == name) {
      used_[i] = true;
      size_t j = i + 1;
      for (; j < n && argv_[j].rfind("--", 0) != 0; ++j) {
        used_[j] = true;
        out.push_back(argv_[j]);
      }
      HYB_CHECK(j > i + 1, command_, ": option ", name, " needs a value");
      i = j - 1;
    } else if (a.rfind(name + "=", 0) == 0) {
      used_[i] = true;
      out.push_back(a.substr(name.size() + 1));
    }
  }
  return out;
}

bool Args::flag(const std::string& name) {
  bool found = false;
  const size_t n = end();
  for (size_t i = 0; i < n; ++i)
    if (argv_[i] == name) {
      used_[i] = true;
      found = true;
    }
  return found;
}

std::optional<std::string> Args::subcommand() {
  if (argv_.empty() || used_[0] || argv_[0].rfind("--", 0) == 0) return std::nullopt;
  used_[0] = true;
  return argv_[0];
}

std::vector<std::string> Args::positional() {
  std::vector<std::string> out;
  const size_t n = end();
  for (size_t i = 0; i < n; ++i)
    if (!used_[i] && argv_[i].rfind("--", 0) != 0) {
      used_[i] = true;
      out.push_back(argv_[i]);
    }
  return out;
}

std::vector<std::string> Args::rest_after_separator() {
  const size_t n = end();
  std::vector<std::string> out;
  for (size_t i = n; i < argv_.size(); ++i) {
    used_[i] = true;
    if (i > n) out.push_back(argv_[i]);
  }
  return out;
}

void Args::finish() {
  const size_t n = end();
  for (size_t i = 0; i < n; ++i)
    HYB_CHECK(used_[i], command_, ": unknown option or argument \"", argv_[i], "\" (see hybrid ", command_, " --help)");
}

}  // namespace hyb
