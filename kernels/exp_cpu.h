// exp for the CPU inner loops of activations and softmax. glibc's expf is an opaque scalar call, so a
// loop calling it never vectorises; this float version is plain arithmetic that GCC vectorises.
// Cephes' method: exp(x) = 2^n exp(r), n = round(x log2 e), |r| <= ln2/2, degree-6 polynomial for
// exp(r); within 2 ulp of the exact value, overflow to inf above 88.72, gradual underflow to 0.
// The double overload is std::exp: gradcheck's finite differences need every bit.
//   for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + exp_cpu(-x[i]));   // vectorised
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace hyb {

inline float exp_cpu(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: the sum's low mantissa bits hold round(x log2 e)
  const float t = x * kLog2e + kRound;
  const float n = t - kRound;
  // Unsigned difference: outside the range handled below t is not of kRound's form, and the
  // garbage it gives must not be signed overflow.
  const int32_t ni = int32_t(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound));
  // ln 2 in two parts (Cephes C1 + C2) so n * C1 is exact.
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  // 2^n as two normal floats: one factor cannot reach 2^128 or 2^-150.
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float y = e * std::bit_cast<float>((n1 + 127) << 23) * std::bit_cast<float>((n2 + 127) << 23);
  // Out of range, select the limit instead of clamping the input: a clamp at the top lets GCC split
  // the loop into masked constant paths, which costs a third more time. NaN fails both tests and
  // stays NaN (e is NaN).
  constexpr float kOverflow = 88.72283935546875f;  // ln(FLT_MAX), rounded up
  constexpr float kUnderflow = -103.97207708f;      // ln(2^-150): below it exp rounds to 0
  const float inf = std::numeric_limits<float>::infinity();
  return x > kOverflow ? inf : (x < kUnderflow ? 0.0f : y);
}

inline double exp_cpu(double x) { return std::exp(x); }

}  // namespace hyb
