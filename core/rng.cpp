#include "core/rng.h"

#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace hyb {

uint32_t fnv1a32(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

PhiloxKey make_key(uint64_t seed, std::string_view name) {
  // Seeds above 2^32 fold their high word in, so every distinct seed below 2^32 is its own key.
  return {uint32_t(seed) ^ uint32_t(seed >> 32), fnv1a32(name)};
}

uint32_t RngStream::next_u32() {
  uint64_t p = pos_++;
  return philox_word(key_, p >> 2, int(p & 3));
}

uint32_t RngStream::below(uint32_t n) {
  uint64_t m = uint64_t(next_u32()) * n;
  uint32_t low = uint32_t(m);
  if (low < n) {
    uint32_t threshold = uint32_t(-n) % n;
    while (low < threshold) {
      m = uint64_t(next_u32()) * n;
      low = uint32_t(m);
    }
  }
  return uint32_t(m >> 32);
}

static double box_muller(uint32_t a, uint32_t b) {
  // (a + 1) / 2^32 is in (0, 1], so the log is finite.
  double u1 = (double(a) + 1.0) * (1.0 / 4294967296.0);
  double u2 = double(b) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

double RngStream::normal() {
  uint32_t a = next_u32();
  uint32_t b = next_u32();
  return box_muller(a, b);
}

double philox_normal(PhiloxKey key, uint64_t i) {
  uint32_t c[4] = {uint32_t(i >> 1), uint32_t(i >> 33), 0u, 0u};
  philox4x32_10(c, key);
  return (i & 1) ? box_muller(c[2], c[3]) : box_muller(c[0], c[1]);
}

template <typename F>
static void fill_elementwise(const Tensor& t, F value_of) {
  HYB_CHECK(is_floating(t.dtype()), "random fill: tensor must be floating point, got ", dtype_name(t.dtype()));
  // Generated on the host in f64, then converted: parameters are initialized once, so the
  // cost is irrelevant and one code path guarantees CPU and GPU runs start from equal weights.
  Tensor host = Tensor::empty(t.shape(), DType::f64);
  double* p = host.data<double>();
  parallel_for(host.numel(), 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) p[i] = value_of(uint64_t(i));
  });
  t.copy_(host);
}

void fill_normal(const Tensor& t, uint64_t seed, std::string_view name, double mean, double std) {
  PhiloxKey key = make_key(seed, name);
  fill_elementwise(t, [&](uint64_t i) { return mean + std * philox_normal(key, i); });
}

void fill_uniform(const Tensor& t, uint64_t seed, std::string_view name, double lo, double hi) {
  PhiloxKey key = make_key(seed, name);
  fill_elementwise(t, [&](uint64_t i) {
    double u = double(philox_word(key, i >> 2, int(i & 3))) * (1.0 / 4294967296.0);
    return lo + (hi - lo) * u;
  });
}

}  // namespace hyb
