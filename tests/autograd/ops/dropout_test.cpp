#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "autograd/ops/dropout.h"

using namespace hyb;

namespace {

// The spec's mask, written out independently of the op: word k of the stream, keep iff >= p 2^32.
bool spec_keep(uint64_t seed, const char* name, uint64_t offset, uint64_t i, double p) {
  const uint64_t k = offset + i;
  const uint32_t word = philox_word(make_key(seed, name), k >> 2, int(k & 3));
  return double(word) >= p * 4294967296.0;
}

std::vector<bool> kept(const Tensor& y) {
  std::vector<bool> m;
  for (double v : y.to_double_vector()) m.push_back(v != 0.0);
  return m;
}

}  // namespace

TEST_CASE("dropout keeps a fraction 1 - p of the elements, within 5 sigma", "[dropout][cpu]") {
  const int64_t n = 1 << 20;
  Tensor x = random_tensor({n}, 701, DType::f32, 1.0, 3.0);  // never 0, so a 0 in y means dropped
  for (double p : {0.1, 0.5, 0.9}) {
    DYNAMIC_SECTION("p " << p) {
      Tensor y = dropout_forward(x, dropout_params(p, 7, "test.dropout", 0));
      int64_t count = 0;
      for (bool k : kept(y)) count += k;
      const double sigma = std::sqrt(double(n) * p * (1 - p));
      REQUIRE(std::abs(double(count) - double(n) * (1 - p)) < 5 * sigma);
    }
  }
}

TEST_CASE("the dropout mask is a function of seed, name and offset only", "[dropout][cpu]") {
  Tensor x = random_tensor({4, 1001}, 702, DType::f64, 1.0, 3.0);
  auto mask = [&](uint64_t seed, const char* name, uint64_t offset) {
    return kept(dropout_forward(x, dropout_params(0.3, seed, name, offset)));
  };
  const std::vector<bool> base = mask(11, "layers.0.dropout", 5);
  REQUIRE(mask(11, "layers.0.dropout", 5) == base);
  REQUIRE(mask(12, "layers.0.dropout", 5) != base);
  REQUIRE(mask(11, "layers.1.dropout", 5) != base);
  REQUIRE(mask(11, "layers.0.dropout", 6) != base);
  // Offset k is the same stream shifted by k elements, whatever the dtype.
  Tensor longer = random_tensor({4 * 1001 + 3}, 703, DType::f32, 1.0, 3.0);
  std::vector<bool> shifted = kept(dropout_forward(longer, dropout_params(0.3, 11, "layers.0.dropout", 2)));
  REQUIRE(std::vector<bool>(shifted.begin() + 3, shifted.end()) == base);
  // And it is the mask the spec writes down.
  for (size_t i = 0; i < base.size(); ++i) REQUIRE(base[i] == spec_keep(11, "layers.0.dropout", 5, i, 0.3));
}

TEST_CASE("dropout scales kept values by 1/(1-p) and its gradient is mask times scale", "[dropout][cpu][grad]") {
  const double p = 0.25;
  Var x(random_tensor({3, 333}, 704), true);
  Var y = dropout(x, p, 3, "test.grad", 17, true);
  std::vector<double> xv = x.data().to_double_vector(), yv = y.data().to_double_vector();
  Tensor dy = random_tensor({3, 333}, 705);
  backward(y, dy);
  std::vector<double> g = x.grad().to_double_vector(), d = dy.to_double_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double m = spec_keep(3, "test.grad", 17, i, p) ? 1.0 / (1.0 - p) : 0.0;
    REQUIRE(yv[i] == xv[i] * m);
    REQUIRE(g[i] == d[i] * m);
  }
}

TEST_CASE("dropout numbers a non-contiguous input's elements in row-major order", "[dropout][cpu]") {
  Tensor x = random_tensor({5, 7}, 706, DType::f64, 1.0, 3.0).transpose(0, 1);
  DropoutParams d = dropout_params(0.5, 9, "test.strided", 0);
  REQUIRE(dropout_forward(x, d).to_double_vector() == dropout_forward(x.contiguous(), d).to_double_vector());
}

TEST_CASE("dropout in eval mode or with p = 0 is the input itself, with no node", "[dropout][cpu]") {
  Var x(random_tensor({8}, 707), true);
  const size_t before = tape_size();
  REQUIRE(dropout(x, 0.5, 1, "test.eval", 0, false).cell() == x.cell());
  REQUIRE(dropout(x, 0.0, 1, "test.eval", 0, true).cell() == x.cell());
  REQUIRE(tape_size() == before);
}

TEST_CASE("dropout rejects p outside [0, 1) naming the stream", "[dropout][cpu][errors]") {
  Var x(random_tensor({8}, 708));
  REQUIRE_THROWS_WITH(dropout(x, 1.0, 1, "model.embed_dropout", 0, true),
                      Catch::Contains("model.embed_dropout") && Catch::Contains("[0, 1)") && Catch::Contains("1"));
  REQUIRE_THROWS_WITH(dropout(x, -0.1, 1, "model.embed_dropout", 0, false), Catch::Contains("-0.1"));
}
