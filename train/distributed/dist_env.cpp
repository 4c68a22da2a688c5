#include "train/distributed/dist_env.h"

#include <cstdlib>

#include "core/error.h"

namespace hyb {

static int int_var(const GetEnv& get, const char* name, int lo) {
  const std::string v = *get(name);
  size_t used = 0;
  long x = -1;
  try {
    x = std::stol(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  HYB_CHECK(used == v.size() && !v.empty() && x >= lo && x <= 1 << 30, "environment variable ", name, "=\"", v,
            "\" is not an integer >= ", lo);
  return int(x);
}

DistEnv dist_env_from(const GetEnv& get) {
  DistEnv e;
  struct Scheme {
    const char* source;
    const char *rank, *size, *local;
  };
  const Scheme schemes[] = {{"launch", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
                            {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
                            {"ompi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}};
  for (const Scheme& s : schemes) {
    if (!get(s.rank) || !get(s.size)) continue;
    e.source = s.source;
    e.rank = int_var(get, s.rank, 0);
    e.world_size = int_var(get, s.size, 1);
    e.local_rank = get(s.local) ? int_var(get, s.local, 0) : 0;
    HYB_CHECK(e.rank < e.world_size, "environment: ", s.rank, "=", e.rank, " is not below ", s.size, "=", e.world_size);
    break;
  }
  if (auto a = get("MASTER_ADDR")) {
    HYB_CHECK(!a->empty(), "environment variable MASTER_ADDR is empty");
    e.master_addr = *a;
  }
  if (get("MASTER_PORT")) {
    e.master_port = int_var(get, "MASTER_PORT", 1);
    HYB_CHECK(e.master_port <= 65535, "environment variable MASTER_PORT=", e.master_port, " is not a port (1..65535)");
  }
  return e;
}

DistEnv dist_env_from_process() {
  return dist_env_from([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace hyb
