// The TCP rendezvous: rank 0 listens on MASTER_PORT and hands a payload (the ncclUniqueId) to every
// other rank, which connects to MASTER_ADDR:MASTER_PORT, retrying until the timeout. Both sides
// give up with an error that names the rank, the address and how long it waited; rank 0 names the
// ranks that never came.
//   std::string id = rendezvous_share(env, env.rank == 0 ? make_id() : "", 300.0);
#pragma once
#include <string>

#include "train/distributed/dist_env.h"

namespace hyb {

// Rank 0 passes the payload and gets it back; the others pass anything and receive rank 0's.
std::string rendezvous_share(const DistEnv& env, const std::string& payload, double timeout_s);

// HYBRID_RENDEZVOUS_TIMEOUT (seconds, default 300).
double rendezvous_timeout_s();

}  // namespace hyb
