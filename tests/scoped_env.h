// An environment variable set for a scope, then put back as it was: tests that switch a path read at
// every call (HYBRID_GDN_PIECES) restore it for the tests after them.
//   ScopedEnv pieces("HYBRID_GDN_PIECES", "0");
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace hyb {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace hyb
