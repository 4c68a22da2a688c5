// bf16 on the device, bit for bit what hyb::bf16 (core/dtype.h) does on the host: round to nearest
// even, NaN stays a quiet NaN with its sign and top payload bits. Using the same bits on both sides is
// what lets a device conversion be compared with the CPU one for equality, not within a tolerance.
//   float f = bf16_to_float(x.bits);   x.bits = float_to_bf16_bits(f);
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/macros.h"

namespace hyb {

__device__ __forceinline__ float bf16_to_float(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// The low and the high bf16 of a packed pair, widened to fp32 from the bit pattern (no conversion
// instruction).
__device__ __forceinline__ float bf16x2_lo(uint32_t a) { return __uint_as_float(a << 16); }
__device__ __forceinline__ float bf16x2_hi(uint32_t a) { return __uint_as_float(a & 0xffff0000u); }

// The dot product of two packed bf16 pairs (the low half first), each half widened to fp32 from its bit
// pattern (no conversion instruction).
__device__ __forceinline__ float bf16x2_dot(uint32_t a, uint32_t b) {
  return bf16x2_lo(a) * bf16x2_lo(b) + bf16x2_hi(a) * bf16x2_hi(b);
}

__device__ __forceinline__ bf16 float_to_bf16(float f) {
  bf16 b;
  b.bits = float_to_bf16_bits(f);
  return b;
}

}  // namespace hyb
