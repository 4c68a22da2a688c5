#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "layers/embedding/embedding_op.h"
#include "parity.h"

using namespace hyb;

static Tensor random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  RngStream r(seed, "test.ids");
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int32_t(r.below(uint32_t(vocab)));
  return Tensor::from_vector<int32_t>(v, {n});
}

TEST_CASE("embedding on cuda matches the cpu reference, with repeated ids", "[embedding][gpu]") {
  Tensor ids = random_ids(1000, 50, 1);  // every id repeats ~20 times
  auto r = cuda_parity([&](const std::vector<Var>& x) { return std::vector<Var>{embedding(ids.to(x[0].device()), x[0])}; },
                       {random_tensor({50, 96}, 2)});
  INFO(r.report);
  REQUIRE(r.ok);
}

TEST_CASE("the cuda embedding gradient is bitwise reproducible", "[embedding][gpu]") {
  Tensor ids = random_ids(4096, 300, 3).to(Device::cuda(0));
  Tensor dout = random_tensor({4096, 128}, 4, DType::f32).to(Device::cuda(0));
  Tensor a = embedding_backward(ids, dout, 300), b = embedding_backward(ids, dout, 300);
  REQUIRE(a.to_double_vector() == b.to_double_vector());
}
