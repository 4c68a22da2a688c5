#include "train/distributed/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

namespace hyb {

namespace {

using Clock = std::chrono::steady_clock;

// Closes the descriptor on every exit path.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Reads or writes exactly n bytes before the deadline; false on a closed peer or timeout.
bool transfer(int fd, void* buf, size_t n, bool write, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const double left_ms = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
    if (left_ms <= 0) return false;
    pollfd pfd{fd, short(write ? POLLOUT : POLLIN), 0};
    if (::poll(&pfd, 1, int(left_ms) + 1) <= 0) continue;
    const ssize_t k = write ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k <= 0) {
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return false;
    }
    p += k;
    n -= size_t(k);
  }
  return true;
}

std::string where(const DistEnv& e) { return str_cat(e.master_addr, ":", e.master_port); }

std::vector<int> serve(const DistEnv& env, double timeout_s) {
  Fd server(::socket(AF_INET6, SOCK_STREAM, 0));
  HYB_CHECK(server.fd >= 0, "rendezvous (rank 0): socket: ", std::strerror(errno));
  int one = 1, zero = 0;
  ::setsockopt(server.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  ::setsockopt(server.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // IPv4 clients too
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  addr.sin6_port = htons(uint16_t(env.master_port));
  HYB_CHECK(::bind(server.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "rendezvous (rank 0): cannot listen on port ",
            env.master_port, " (MASTER_PORT): ", std::strerror(errno));
  HYB_CHECK(::listen(server.fd, 128) == 0, "rendezvous (rank 0): listen: ", std::strerror(errno));

  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::vector<bool> served(size_t(env.world_size), false);
  served[0] = true;
  std::vector<int> fds(size_t(env.world_size), -1);
  // Sockets already accepted are closed if rank 0 gives up.
  struct Closer {
    std::vector<int>& fds;
    bool armed = true;
    ~Closer() {
      if (armed)
        for (int f : fds)
          if (f >= 0) ::close(f);
    }
  } closer{fds};
  int left = env.world_size - 1;
  while (left > 0) {
    const double left_ms = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
    pollfd pfd{server.fd, POLLIN, 0};
    if (left_ms <= 0 || ::poll(&pfd, 1, int(std::max(left_ms, 0.0)) + 1) <= 0) {
      if (Clock::now() < deadline) continue;
      std::string missing;
      for (int r = 0; r < env.world_size; ++r)
        if (!served[size_t(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw Error(str_cat("rendezvous (rank 0): ranks ", missing, " did not connect to port ", env.master_port,
                          " within ", timeout_s, " s (HYBRID_RENDEZVOUS_TIMEOUT); did they start, with MASTER_ADDR=",
                          env.master_addr, " and WORLD_SIZE=", env.world_size, "?"));
    }
    Fd client(::accept(server.fd, nullptr, nullptr));
    if (client.fd < 0) continue;
    int one_flag = 1;
    ::setsockopt(client.fd, IPPROTO_TCP, TCP_NODELAY, &one_flag, sizeof(one_flag));
    int32_t hello[2] = {-1, -1};  // rank, world size
    if (!transfer(client.fd, hello, sizeof(hello), false, deadline)) continue;
    HYB_CHECK(hello[1] == env.world_size, "rendezvous (rank 0): rank ", hello[0], " says WORLD_SIZE=", hello[1],
              " but rank 0 has ", env.world_size);
    HYB_CHECK(hello[0] > 0 && hello[0] < env.world_size, "rendezvous (rank 0): a client says it is rank ", hello[0],
              " of ", env.world_size);
    HYB_CHECK(!served[size_t(hello[0])], "rendezvous (rank 0): two processes say they are rank ", hello[0]);
    served[size_t(hello[0])] = true;
    fds[size_t(hello[0])] = client.fd;
    client.fd = -1;
    --left;
  }
  closer.armed = false;
  return fds;
}

int fetch(const DistEnv& env, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::string last_error = "no attempt";
  while (Clock::now() < deadline) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const int gai = ::getaddrinfo(env.master_addr.c_str(), std::to_string(env.master_port).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = ::gai_strerror(gai);
    } else {
      for (addrinfo* a = res; a; a = a->ai_next) {
        Fd fd(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
        if (fd.fd < 0 || ::connect(fd.fd, a->ai_addr, a->ai_addrlen) != 0) {
          last_error = std::strerror(errno);
          continue;
        }
        int32_t hello[2] = {env.rank, env.world_size};
        if (!transfer(fd.fd, hello, sizeof(hello), true, deadline)) {
          last_error = "connection closed by rank 0";
          continue;
        }
        int one_flag = 1;
        ::setsockopt(fd.fd, IPPROTO_TCP, TCP_NODELAY, &one_flag, sizeof(one_flag));
        ::freeaddrinfo(res);
        const int out = fd.fd;
        fd.fd = -1;
        return out;
      }
      ::freeaddrinfo(res);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  throw Error(str_cat("rendezvous (rank ", env.rank, "): could not reach rank 0 at ", where(env), " (MASTER_ADDR:MASTER_PORT) within ",
                      timeout_s, " s (HYBRID_RENDEZVOUS_TIMEOUT); last error: ", last_error));
}

}  // namespace

double rendezvous_timeout_s() {
  const char* v = std::getenv("HYBRID_RENDEZVOUS_TIMEOUT");
  if (!v) return 300;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  HYB_CHECK(end && *end == '\0' && s > 0, "environment variable HYBRID_RENDEZVOUS_TIMEOUT=\"", v,
            "\" is not a positive number of seconds");
  return s;
}

Star::~Star() {
  for (int f : fds_)
    if (f >= 0) ::close(f);
}

int Star::fd(int peer) const {
  HYB_ASSERT(peer >= 0 && peer < world_ && peer != rank_ && (rank_ == 0 || peer == 0), "rank ", rank_,
             " has no connection to rank ", peer);
  return rank_ == 0 ? fds_[size_t(peer)] : fds_[0];
}

void Star::send(int peer, const void* data, size_t n, double timeout_s) const {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  HYB_CHECK(transfer(fd(peer), const_cast<void*>(data), n, true, deadline), "data parallel: rank ", rank_, " of ", world_,
            ": sending to rank ", peer, " failed or took over ", timeout_s,
            " s (HYBRID_COMM_TIMEOUT); that rank probably died or stopped (see its log)");
}

void Star::recv(int peer, void* data, size_t n, double timeout_s) const {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  HYB_CHECK(transfer(fd(peer), data, n, false, deadline), "data parallel: rank ", rank_, " of ", world_,
            ": receiving from rank ", peer, " failed or took over ", timeout_s,
            " s (HYBRID_COMM_TIMEOUT); that rank probably died or stopped (see its log)");
}

Star rendezvous_star(const DistEnv& env, double timeout_s) {
  if (env.world_size == 1) return Star(0, 1, {});
  if (env.rank == 0) return Star(0, env.world_size, serve(env, timeout_s));
  return Star(env.rank, env.world_size, {fetch(env, timeout_s)});
}

std::string rendezvous_share(const DistEnv& env, const std::string& payload, double timeout_s) {
  const Star star = rendezvous_star(env, timeout_s);
  if (env.world_size == 1) return payload;
  if (env.rank == 0) {
    const uint32_t n = uint32_t(payload.size());
    for (int r = 1; r < env.world_size; ++r) {
      star.send(r, &n, sizeof(n), timeout_s);
      star.send(r, payload.data(), n, timeout_s);
    }
    return payload;
  }
  uint32_t n = 0;
  star.recv(0, &n, sizeof(n), timeout_s);
  std::string out(n, '\0');
  star.recv(0, out.data(), n, timeout_s);
  return out;
}

}  // namespace hyb
