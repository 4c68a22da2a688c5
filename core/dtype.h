// Element types of a Tensor, and the bf16 storage type shared by host and device code.
// bf16 is the upper half of an IEEE float; conversion rounds to nearest even, NaN stays NaN.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace hyb {

enum class DType : uint8_t { f32, f64, bf16, i32, i64, u16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);                 // "f32", ...
const char* dtype_safetensors_name(DType t);     // "F32", ...
bool dtype_from_safetensors_name(std::string_view s, DType* out);
inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16; }

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
};
static_assert(sizeof(bf16) == 2);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }

}  // namespace hyb
