// The `hybrid` command line: one subcommand per verb, each in its own file under train/ or eval/.
#include <cstdio>
#include <string>

#include "core/error.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::puts("usage: hybrid <command> [options]\n\ncommands:\n  (none yet)");
    return argc < 2 ? 2 : 0;
  }
  std::fprintf(stderr, "hybrid: unknown command \"%s\" (see hybrid --help)\n", argv[1]);
  return 2;
}
