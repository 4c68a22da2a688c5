// Who this process is in a data-parallel job, from its environment: the torchrun-style variables
// `hybrid launch` sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or a scheduler's
// own (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID, or OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK),
// so a job started by srun or mpirun needs no launcher. MASTER_ADDR and MASTER_PORT are still
// needed there (docs/distributed.md shows how an sbatch script sets them).
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace hyb {

struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  // "launch" (torchrun variables), "slurm", "ompi" or "single"
  bool distributed() const { return world_size > 1; }
};

using GetEnv = std::function<std::optional<std::string>(const char* name)>;

// Reads the process environment; `get` replaces getenv in tests. Bad values name the variable.
DistEnv dist_env_from(const GetEnv& get);
DistEnv dist_env_from_process();

}  // namespace hyb
