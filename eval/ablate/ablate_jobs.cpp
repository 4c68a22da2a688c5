// posix_spawn with the child's stdout and stderr on its log file; the runner polls waitpid every
// 100 ms, which is nothing against units that train for tens of seconds.
#include "eval/ablate/ablate_jobs.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "train/cli.h"

extern char** environ;

namespace hyb {

namespace fs = std::filesystem;

namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

std::string last_log_line(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "log.txt");
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

pid_t spawn_unit(const std::string& exe, const std::string& dir) {
  const std::string log = (fs::path(dir) / "log.txt").string();
  std::vector<std::string> args{exe, "ablate", "--unit", dir};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  HYB_CHECK(rc == 0, "ablate: cannot start ", exe, " for ", dir, ": ", std::strerror(rc));
  return pid;
}

}  // namespace

std::vector<JobOutcome> run_jobs(const std::vector<Job>& jobs, int max_parallel, const std::function<bool()>& stop_starting,
                                 const std::function<void(size_t, const JobOutcome&)>& on_done, bool* interrupted) {
  const std::string exe = hybrid_executable();
  struct sigaction sa{}, old_int{}, old_term{};
  sa.sa_handler = on_stop_signal;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  g_stop_signal = 0;

  std::vector<JobOutcome> out(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i)
    if (jobs[i].finished) out[i].state = JobState::done;
  struct Running {
    size_t job;
    pid_t pid;
    std::chrono::steady_clock::time_point start;
  };
  std::vector<Running> running;
  auto finish = [&](size_t i, JobOutcome o) {
    out[i] = o;
    on_done(i, out[i]);
  };
  for (;;) {
    // Reap.
    for (size_t r = 0; r < running.size();) {
      int status = 0;
      if (::waitpid(running[r].pid, &status, WNOHANG) != running[r].pid) {
        ++r;
        continue;
      }
      JobOutcome o;
      o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - running[r].start).count();
      const std::string& dir = jobs[running[r].job].dir;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && fs::exists(fs::path(dir) / "result.json")) {
        o.state = JobState::done;
      } else {
        o.state = JobState::failed;
        o.why = str_cat(WIFEXITED(status) ? str_cat("exit status ", WEXITSTATUS(status)) : str_cat("signal ", WTERMSIG(status)),
                        ": ", last_log_line(dir), " (", dir, "/log.txt)");
      }
      finish(running[r].job, o);
      running.erase(running.begin() + long(r));
    }
    if (g_stop_signal) break;
    // Skip what can no longer run; start what can.
    bool waiting = false;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (out[i].state != JobState::pending) continue;
      bool is_running = false;
      for (const Running& r : running) is_running = is_running || r.job == i;
      if (is_running) continue;
      const int dep = jobs[i].depends_on;
      if (dep >= 0 && (out[size_t(dep)].state == JobState::failed || out[size_t(dep)].state == JobState::skipped)) {
        finish(i, {JobState::skipped, "the unit it evaluates did not finish", 0});
        continue;
      }
      if (stop_starting()) {
        finish(i, {JobState::skipped, "not run: the time budget ran out", 0});
        continue;
      }
      if (dep >= 0 && out[size_t(dep)].state != JobState::done) {
        waiting = true;
        continue;
      }
      if (int(running.size()) >= max_parallel) {
        waiting = true;
        continue;
      }
      fs::create_directories(jobs[i].dir);
      running.push_back({i, spawn_unit(exe, jobs[i].dir), std::chrono::steady_clock::now()});
    }
    if (running.empty() && !waiting) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (g_stop_signal) {
    std::fprintf(stderr, "ablate: signal %d: stopping %zu running units (finished units are kept for --resume)\n",
                 int(g_stop_signal), running.size());
    for (const Running& r : running) ::kill(r.pid, SIGTERM);
    for (const Running& r : running) ::waitpid(r.pid, nullptr, 0);
  }
  if (interrupted) *interrupted = g_stop_signal != 0;
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return out;
}

}  // namespace hyb
