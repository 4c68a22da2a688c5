// Test entry point: Catch2 v2 has no SKIP, so without a GPU the [gpu] tests are filtered out here
// and the run says so, instead of failing or silently passing them. A filter given on the command
// line keeps that: every alternative of it is narrowed to the tests not tagged [gpu].
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "core/device.h"

namespace {

// `spec` with ~[gpu] after each of its comma-separated alternatives (commas inside quoted test
// names do not separate). Catch ANDs what stands side by side and ORs across commas.
std::string without_gpu(const std::string& spec) {
  std::string out;
  bool quoted = false, nonempty = false;
  for (char c : spec) {
    if (c == '"') quoted = !quoted;
    if (c == ',' && !quoted) {
      if (nonempty) out += "~[gpu]";
      nonempty = false;
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      nonempty = true;
    }
    out += c;
  }
  if (nonempty) out += "~[gpu]";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv)) return rc;
  if (hyb::cuda_device_count() == 0) {
    std::fprintf(stderr, "no CUDA device: tests tagged [gpu] are skipped\n");
    std::vector<std::string>& specs = session.configData().testsOrTags;
    if (specs.empty()) specs.push_back("~[gpu]");
    else
      for (std::string& s : specs) s = without_gpu(s);
  }
  return session.run();
}
