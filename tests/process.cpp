#include "process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "core/error.h"

extern char** environ;

namespace hyb {

ProcessResult run_process(const std::vector<std::string>& args, const std::string& extra_env) {
  return run_process(args, extra_env.empty() ? std::vector<std::string>{} : std::vector<std::string>{extra_env});
}

ProcessResult run_process(const std::vector<std::string>& args, const std::vector<std::string>& extra_env) {
  namespace fs = std::filesystem;
  static std::atomic<int> calls{0};
  fs::create_directories(fs::temp_directory_path() / "hybrid_tests");
  const std::string log = (fs::temp_directory_path() / "hybrid_tests" /
                           ("process." + std::to_string(getpid()) + "." + std::to_string(calls++) + ".log"))
                              .string();
  std::vector<std::string> argv_s = args;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    bool replaced = false;
    for (const std::string& x : extra_env) replaced = replaced || entry.rfind(x.substr(0, x.find('=') + 1), 0) == 0;
    if (!replaced) env_s.push_back(entry);
  }
  env_s.insert(env_s.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  HYB_CHECK(rc == 0, "run_process: cannot start ", args[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ProcessResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  std::ifstream in(log);
  r.output.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

ProcessResult run_hybrid(const char* binary, std::vector<std::string> args) {
  args.insert(args.begin(), binary);
  return run_process(args, "OMP_NUM_THREADS=1");
}

}  // namespace hyb
