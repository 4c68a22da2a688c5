// `hybrid launch --nproc-per-node N [--nnodes K --node-rank R --master-addr A --master-port P] --
// train --config ...`: starts N copies of hybrid on this node with the torchrun-style environment
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and watches them. When
// one fails, the others are stopped (SIGTERM, then SIGKILL after a grace period) so the group
// never hangs on a dead peer; the launcher exits with the first failure's status. SIGINT and
// SIGTERM sent to the launcher reach every rank.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "train/cli.h"

namespace hyb {

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Child {
  pid_t pid;
  int rank;
  bool running = true;
};

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string describe(int status) {
  return WIFEXITED(status) ? str_cat("exited with status ", WEXITSTATUS(status))
                           : str_cat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
}

void signal_all(std::vector<Child>& kids, int sig) {
  for (Child& c : kids)
    if (c.running) ::kill(c.pid, sig);
}

// Reaps children until none runs or the deadline passes; returns the first failure's status (or 0).
void reap(std::vector<Child>& kids, bool block, int* first_failure, int* failed_rank) {
  for (Child& c : kids) {
    if (!c.running) continue;
    int status = 0;
    const pid_t r = ::waitpid(c.pid, &status, block ? 0 : WNOHANG);
    if (r != c.pid) continue;
    c.running = false;
    if (exit_code(status) != 0 && *first_failure == 0) {
      *first_failure = exit_code(status);
      *failed_rank = c.rank;
      std::fprintf(stderr, "launch: rank %d %s; stopping the other ranks\n", c.rank, describe(status).c_str());
    }
  }
}

bool any_running(const std::vector<Child>& kids) {
  for (const Child& c : kids)
    if (c.running) return true;
  return false;
}

}  // namespace

int cmd_launch(Args& args) {
  const int64_t nproc = args.integer("--nproc-per-node", 1);
  const int64_t nnodes = args.integer("--nnodes", 1);
  const int64_t node_rank = args.integer("--node-rank", 0);
  const std::string addr = args.value("--master-addr", "127.0.0.1");
  const int64_t port = args.integer("--master-port", 29500);
  const double grace = args.number("--grace-seconds", 10);
  std::vector<std::string> rest = args.rest_after_separator();
  args.finish();
  HYB_CHECK(nproc >= 1 && nproc <= 1024, "launch: --nproc-per-node must be in [1, 1024], got ", nproc);
  HYB_CHECK(nnodes >= 1, "launch: --nnodes must be >= 1, got ", nnodes);
  HYB_CHECK(node_rank >= 0 && node_rank < nnodes, "launch: --node-rank ", node_rank, " is not in [0, ", nnodes, ")");
  HYB_CHECK(port >= 1 && port <= 65535, "launch: --master-port ", port, " is not a port (1..65535)");
  HYB_CHECK(!rest.empty(), "launch: give the command after --, e.g. hybrid launch --nproc-per-node 2 -- train --config FILE");

  const std::string exe = hybrid_executable();
  const int64_t world = nproc * nnodes;
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  std::vector<Child> kids;
  for (int64_t local = 0; local < nproc; ++local) {
    const int rank = int(node_rank * nproc + local);
    const pid_t pid = ::fork();
    HYB_CHECK(pid >= 0, "launch: fork failed for rank ", rank, ": ", std::strerror(errno));
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(exe.c_str())};
      for (std::string& a : rest) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      std::fprintf(stderr, "launch: exec %s failed for rank %d: %s\n", exe.c_str(), rank, std::strerror(errno));
      ::_exit(127);
    }
    kids.push_back({pid, rank});
  }

  int first_failure = 0, failed_rank = -1;
  while (any_running(kids) && first_failure == 0 && g_signal == 0) {
    reap(kids, false, &first_failure, &failed_rank);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (any_running(kids)) {
    if (g_signal) std::fprintf(stderr, "launch: got signal %d; stopping every rank\n", int(g_signal));
    signal_all(kids, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
    while (any_running(kids) && std::chrono::steady_clock::now() < deadline) {
      reap(kids, false, &first_failure, &failed_rank);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    signal_all(kids, SIGKILL);
    reap(kids, true, &first_failure, &failed_rank);
  }
  if (first_failure != 0) return first_failure;
  return g_signal ? 128 + int(g_signal) : 0;
}

}  // namespace hyb
