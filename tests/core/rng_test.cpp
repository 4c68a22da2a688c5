#include <catch2/catch.hpp>

#include <cmath>

#include "core/rng.h"
#include "core/tensor.h"

using namespace hyb;

TEST_CASE("philox4x32-10 reproduces the Random123 known-answer vectors", "[core][rng]") {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t c[4] = {k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]};
    philox4x32_10(c, {k.key[0], k.key[1]});
    for (int i = 0; i < 4; ++i) REQUIRE(c[i] == k.out[i]);
  }
}

TEST_CASE("fnv1a32 matches the published test values", "[core][rng]") {
  REQUIRE(fnv1a32("") == 0x811c9dc5u);
  REQUIRE(fnv1a32("a") == 0xe40c292cu);
  REQUIRE(fnv1a32("foobar") == 0xbf9cf968u);
}

TEST_CASE("a stream restored at its position continues identically", "[core][rng]") {
  RngStream a(42, "mqar.train");
  for (int i = 0; i < 13; ++i) a.next_u32();
  RngStream b(42, "mqar.train");
  b.set_position(a.position());
  for (int i = 0; i < 100; ++i) REQUIRE(a.next_u32() == b.next_u32());
  RngStream other(42, "mqar.test");
  RngStream c(42, "mqar.train");
  int same = 0;
  for (int i = 0; i < 100; ++i) same += other.next_u32() == c.next_u32();
  REQUIRE(same < 3);
}

TEST_CASE("below(n) is uniform and in range", "[core][rng]") {
  RngStream r(7, "test.below");
  std::vector<int> counts(10, 0);
  for (int i = 0; i < 100000; ++i) {
    uint32_t v = r.below(10);
    REQUIRE(v < 10);
    ++counts[v];
  }
  for (int c : counts) REQUIRE(std::abs(c - 10000) < 500);  // > 5 sigma
}

TEST_CASE("fill_normal has the asked mean and std and depends only on seed and name", "[core][rng]") {
  Tensor a = Tensor::empty({200, 100}, DType::f32);
  fill_normal(a, 3, "w", 0.5, 2.0);
  std::vector<double> v = a.to_double_vector();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= double(v.size());
  for (double x : v) s += (x - m) * (x - m);
  s = std::sqrt(s / double(v.size()));
  REQUIRE(std::abs(m - 0.5) < 0.05);
  REQUIRE(std::abs(s - 2.0) < 0.05);
  Tensor b = Tensor::empty({20000}, DType::f64);
  fill_normal(b, 3, "w", 0.5, 2.0);
  std::vector<double> bv = b.to_double_vector();
  for (size_t i = 0; i < 50; ++i) REQUIRE(float(bv[i]) == float(v[i]));
}

#include "core/sha256.h"

TEST_CASE("sha256 matches the FIPS 180-4 examples", "[core][sha256]") {
  REQUIRE(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  REQUIRE(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  REQUIRE(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;
  std::string million(1000000, 'a');
  for (size_t i = 0; i < million.size(); i += 997) h.update(million.data() + i, std::min<size_t>(997, million.size() - i));
  REQUIRE(h.hex_digest() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
