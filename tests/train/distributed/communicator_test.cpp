// The thread communicator's collectives (the CPU stand-in for NCCL) and the environment a rank
// reads its place in the job from.
#include <catch2/catch.hpp>

#include <map>
#include <thread>

#include "compare.h"
#include "train/distributed/dist_env.h"
#include "train/distributed/thread_communicator.h"

using namespace hyb;

namespace {

// Runs f(comm) on `ranks` threads and rethrows the first failure.
template <typename F>
void on_ranks(int ranks, F f) {
  ThreadGroup group(ranks);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(group, r);
        f(comm);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Rank r's test values: distinct per rank and element, never zero.
Tensor values(int rank, int64_t n) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(float(rank + 1) * 0.5f + float(i) * 0.25f - (rank == 1 ? 3.0f : 0.0f));
  return Tensor::from_vector(v, {n});
}

}  // namespace

TEST_CASE("thread communicator: all_reduce sum, mean and max, in place", "[distributed]") {
  const int ranks = 3;
  const int64_t n = 7;
  std::vector<double> sum(n, 0), mx(n, -1e30);
  for (int r = 0; r < ranks; ++r) {
    auto v = values(r, n).to_double_vector();
    for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += v[size_t(i)], mx[size_t(i)] = std::max(mx[size_t(i)], v[size_t(i)]);
  }
  // Catch's assertions are not thread-safe: ranks record, the test thread checks.
  std::vector<std::vector<double>> sums(ranks), means(ranks), maxes(ranks);
  on_ranks(ranks, [&](Communicator& c) {
    Tensor a = values(c.rank(), n), m = values(c.rank(), n), x = values(c.rank(), n);
    c.all_reduce(a, ReduceOp::sum);
    c.all_reduce(m, ReduceOp::mean);
    c.all_reduce(x, ReduceOp::max);
    sums[size_t(c.rank())] = a.to_double_vector();
    means[size_t(c.rank())] = m.to_double_vector();
    maxes[size_t(c.rank())] = x.to_double_vector();
  });
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(sums[size_t(r)][size_t(i)] == Approx(sum[size_t(i)]).epsilon(1e-6));
      REQUIRE(means[size_t(r)][size_t(i)] == Approx(sum[size_t(i)] / ranks).epsilon(1e-6));
      REQUIRE(maxes[size_t(r)][size_t(i)] == mx[size_t(i)]);
    }
}

TEST_CASE("thread communicator: reduce_scatter in place, all_gather and broadcast", "[distributed]") {
  const int ranks = 4;
  const int64_t shard = 3, n = shard * ranks;
  std::vector<double> mean(n, 0);
  for (int r = 0; r < ranks; ++r) {
    auto v = values(r, n).to_double_vector();
    for (int64_t i = 0; i < n; ++i) mean[size_t(i)] += v[size_t(i)] / ranks;
  }
  std::vector<std::vector<double>> scattered(ranks), gathered(ranks), broadcast(ranks);
  on_ranks(ranks, [&](Communicator& c) {
    Tensor buf = values(c.rank(), n);
    Tensor mine = buf.narrow(0, c.rank() * shard, shard);
    c.reduce_scatter(buf, mine, ReduceOp::mean);
    scattered[size_t(c.rank())] = mine.to_double_vector();
    Tensor all = Tensor::zeros({n});
    c.all_gather(mine, all);
    gathered[size_t(c.rank())] = all.to_double_vector();
    Tensor b = values(c.rank(), 5);
    c.broadcast(b, 2);
    broadcast[size_t(c.rank())] = b.to_double_vector();
  });
  for (int r = 0; r < ranks; ++r) {
    for (int64_t i = 0; i < shard; ++i)
      REQUIRE(scattered[size_t(r)][size_t(i)] == Approx(mean[size_t(r * shard + i)]).epsilon(1e-6));
    for (int64_t i = 0; i < n; ++i) REQUIRE(gathered[size_t(r)][size_t(i)] == Approx(mean[size_t(i)]).epsilon(1e-6));
    REQUIRE(broadcast[size_t(r)] == values(2, 5).to_double_vector());
  }
}

TEST_CASE("thread communicator: ranks that disagree on sizes get an error naming them", "[distributed]") {
  REQUIRE_THROWS_WITH(on_ranks(2,
                               [](Communicator& c) {
                                 Tensor t = values(c.rank(), 4 + c.rank());
                                 c.all_reduce(t, ReduceOp::sum);
                               }),
                      Catch::Contains("all_reduce: rank") && Catch::Contains("elements"));
}

TEST_CASE("a rank's place in the job comes from hybrid launch, SLURM or Open MPI variables", "[distributed]") {
  auto env = [](std::map<std::string, std::string> vars) {
    return dist_env_from([vars](const char* name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    });
  };
  DistEnv single = env({});
  REQUIRE(single.world_size == 1);
  REQUIRE(!single.distributed());

  DistEnv l = env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29600"}});
  REQUIRE((l.source == "launch" && l.rank == 3 && l.world_size == 4 && l.local_rank == 1));
  REQUIRE((l.master_addr == "node7" && l.master_port == 29600));

  DistEnv s = env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}});
  REQUIRE((s.source == "slurm" && s.rank == 5 && s.world_size == 8 && s.local_rank == 1));

  DistEnv o = env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  REQUIRE((o.source == "ompi" && o.rank == 1 && o.world_size == 2 && o.local_rank == 1));

  REQUIRE_THROWS_WITH(env({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), Catch::Contains("RANK=4 is not below WORLD_SIZE=4"));
  REQUIRE_THROWS_WITH(env({{"RANK", "x1"}, {"WORLD_SIZE", "4"}}), Catch::Contains("RANK=\"x1\" is not an integer"));
  REQUIRE_THROWS_WITH(env({{"MASTER_PORT", "70000"}}), Catch::Contains("MASTER_PORT=70000 is not a port"));
}
