// The TCP rendezvous on loopback: rank 0's payload reaches every rank; a rank with no server, and
// a rank 0 whose peers never come, give up at the timeout with the address and the missing ranks.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "train/distributed/rendezvous.h"

using namespace hyb;

namespace {

DistEnv env_of(int rank, int world, int port) {
  DistEnv e;
  e.rank = rank;
  e.world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  e.source = "launch";
  return e;
}

// A port per test run, away from common services; tests of one binary run one after another.
int test_port(int k) { return 20000 + int(::getpid() % 20000) + k; }

}  // namespace

TEST_CASE("rendezvous: rank 0's payload reaches every rank, clients may start first", "[distributed]") {
  const int world = 4, port = test_port(0);
  const std::string payload = std::string("nccl-id\0with-zeros", 18);
  std::vector<std::string> got(world);
  std::vector<std::thread> threads;
  for (int r = 1; r < world; ++r)
    threads.emplace_back([&, r] { got[size_t(r)] = rendezvous_share(env_of(r, world, port), "", 20.0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // clients retry until the server is up
  got[0] = rendezvous_share(env_of(0, world, port), payload, 20.0);
  for (auto& t : threads) t.join();
  for (const std::string& g : got) REQUIRE(g == payload);
}

TEST_CASE("rendezvous: a rank that cannot reach rank 0 names the address and the wait", "[distributed]") {
  const int port = test_port(1);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(rendezvous_share(env_of(2, 3, port), "", 0.6),
                      Catch::Contains("rendezvous (rank 2): could not reach rank 0 at 127.0.0.1:" + std::to_string(port)) &&
                          Catch::Contains("within 0.6 s"));
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("rendezvous: rank 0 names the ranks that never connected", "[distributed]") {
  const int port = test_port(2);
  std::string one_error;
  std::thread one([&] {
    try {
      rendezvous_share(env_of(1, 3, port), "", 5.0);
    } catch (const Error& e) {
      one_error = e.what();
    }
  });
  REQUIRE_THROWS_WITH(rendezvous_share(env_of(0, 3, port), "id", 1.0),
                      Catch::Contains("rendezvous (rank 0): ranks 2 did not connect"));
  one.join();
  // Rank 1 had connected; rank 0 giving up closes its connection, which rank 1 reports.
  REQUIRE_THAT(one_error, Catch::Contains("rank 1 of 3: receiving from rank 0 failed"));
}
