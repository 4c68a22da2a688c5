// The TCP rendezvous: rank 0 listens on MASTER_PORT, every other rank connects to
// MASTER_ADDR:MASTER_PORT (retrying until the timeout) and says who it is. The result is a star of
// open connections: rank 0 holds one per rank, the others one to rank 0. NCCL uses it once, to hand
// out the ncclUniqueId; the CPU communicator (tcp_communicator.h) keeps it for its collectives.
// Both sides give up with an error that names the rank, the address and how long it waited; rank 0
// names the ranks that never came.
//   Star star = rendezvous_star(env, 300.0);
//   std::string id = rendezvous_share(env, env.rank == 0 ? make_id() : "", 300.0);
#pragma once
#include <string>
#include <vector>

#include "train/distributed/dist_env.h"

namespace hyb {

class Star {
 public:
  Star(int rank, int world, std::vector<int> fds) : rank_(rank), world_(world), fds_(std::move(fds)) {}
  ~Star();
  Star(Star&& o) noexcept : rank_(o.rank_), world_(o.world_), fds_(std::move(o.fds_)) { o.fds_.clear(); }
  Star(const Star&) = delete;
  Star& operator=(const Star&) = delete;

  // Exactly n bytes to or from rank `peer` (rank 0 talks to every rank, the others only to rank 0),
  // within timeout_s; a closed connection or the timeout is an error naming both ranks.
  void send(int peer, const void* data, size_t n, double timeout_s) const;
  void recv(int peer, void* data, size_t n, double timeout_s) const;
  int rank() const { return rank_; }
  int world() const { return world_; }

 private:
  int fd(int peer) const;
  int rank_, world_;
  std::vector<int> fds_;  // rank 0: index r holds rank r's socket (index 0 unused); others: [0] to rank 0
};

Star rendezvous_star(const DistEnv& env, double timeout_s);

// Rank 0 passes the payload and gets it back; the others pass anything and receive rank 0's.
std::string rendezvous_share(const DistEnv& env, const std::string& payload, double timeout_s);

// HYBRID_RENDEZVOUS_TIMEOUT (seconds, default 300).
double rendezvous_timeout_s();

}  // namespace hyb
