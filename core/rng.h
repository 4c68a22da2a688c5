// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11). A stream is the key
// (seed, fnv1a32(name)) and a 64-bit block counter; block c gives four 32-bit words. Because the
// numbers are a pure function of (key, counter), CPU and GPU produce the same values for the same
// element index, and a stream's position is one integer to save in a checkpoint.
//   RngStream r(seed, "mqar.train");
//   uint32_t token = r.below(8192);
//   fill_normal(w, seed, "model.layers.0.mixer.q_proj.weight", 0.0, 0.02);
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "core/macros.h"

namespace hyb {

class Tensor;

struct PhiloxKey {
  uint32_t k0, k1;
};

HYB_HD void philox4x32_10(uint32_t c[4], PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kM0) * c[0];
    uint64_t p1 = uint64_t(kM1) * c[2];
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    k0 += kW0;
    k1 += kW1;
  }
}

// Word `lane` (0..3) of block `counter`; counter words 2 and 3 stay zero.
HYB_HD uint32_t philox_word(PhiloxKey key, uint64_t counter, int lane) {
  uint32_t c[4] = {uint32_t(counter), uint32_t(counter >> 32), 0u, 0u};
  philox4x32_10(c, key);
  return c[lane];
}

// Uniform in [0, 1) with 24 random bits (eval.md 0).
HYB_HD float u32_to_unit_float(uint32_t u) { return float(u >> 8) * (1.0f / 16777216.0f); }

uint32_t fnv1a32(std::string_view s);
PhiloxKey make_key(uint64_t seed, std::string_view stream_name);

class RngStream {
 public:
  RngStream(uint64_t seed, std::string_view name) : key_(make_key(seed, name)) {}
  uint32_t next_u32();
  uint32_t below(uint32_t n);  // Lemire's multiply-and-reject, exact
  float uniform() { return u32_to_unit_float(next_u32()); }
  double normal();             // Box-Muller on two 32-bit words
  // The stream position: words consumed so far. Restoring it continues the stream exactly.
  uint64_t position() const { return pos_; }
  void set_position(uint64_t p) { pos_ = p; }

 private:
  PhiloxKey key_;
  uint64_t pos_ = 0;
};

// Element i of the tensor (row-major order) gets the i-th value of the stream, whatever the device.
void fill_normal(const Tensor& t, uint64_t seed, std::string_view name, double mean, double std);
void fill_uniform(const Tensor& t, uint64_t seed, std::string_view name, double lo, double hi);
// The i-th normal of a stream: words 2i and 2i+1 through Box-Muller (cos branch).
double philox_normal(PhiloxKey key, uint64_t i);

}  // namespace hyb
