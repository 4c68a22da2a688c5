// Runs a program in a child process with an optional extra environment variable, waits, and
// returns its exit status and everything it printed. For tests that need a real process: a crash
// must hit a real process, and a Python interop check runs the Python interpreter.
#pragma once
#include <string>
#include <vector>

namespace hyb {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr together
};

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& extra_env = "");
// Several "NAME=VALUE" entries; safe to call from several threads at once.
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env);
// The hybrid binary (the test target's HYBRID_BINARY) with `args`, on one thread: the tests' models
// are too small to gain from more, and waiting threads spin on a busy machine.
ProcessResult run_hybrid(const char* binary, std::vector<std::string> args);

}  // namespace hyb
