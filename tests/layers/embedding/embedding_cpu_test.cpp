#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/embedding/embedding_op.h"

using namespace hyb;

TEST_CASE("embedding gradient scatters and adds repeated ids", "[embedding][cpu][grad]") {
  Tensor ids = Tensor::from_vector<int32_t>({3, 0, 3, 5, 1, 3}, {2, 3});
  auto r = gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{embedding(ids, x[0])}; },
                     {random_tensor({6, 4}, 21)});
  INFO(r.report);
  REQUIRE(r.max_error < 1e-8);
}

TEST_CASE("embedding refuses ids outside the vocabulary", "[embedding][cpu][errors]") {
  Tensor ids = Tensor::from_vector<int32_t>({1, 9}, {2});
  REQUIRE_THROWS_WITH(embedding_forward(ids, random_tensor({6, 4}, 1)),
                      Catch::Contains("token id 9") && Catch::Contains("[0, 6)"));
}
