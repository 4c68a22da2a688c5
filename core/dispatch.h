// Calls f with a value of the C++ type matching a DType, so one template serves every dtype:
//   visit_dtype(t.dtype(), [&](auto tag) { using T = decltype(tag); ... });
// visit_float covers the types the CPU reference ops compute in (f32, f64).
#pragma once
#include "core/dtype.h"
#include "core/error.h"

namespace hyb {

template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::bf16: return f(bf16{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::u16: return f(uint16_t{});
  }
  HYB_ASSERT(false, "bad dtype");
}

template <typename F>
decltype(auto) visit_float(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    default: break;
  }
  throw Error(str_cat(op, ": the CPU path computes in f32 or f64, got ", dtype_name(t)));
}

template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else if constexpr (std::is_same_v<From, bf16>) return To(float(v));
  else if constexpr (std::is_same_v<To, bf16>) return bf16(float(v));
  else return static_cast<To>(v);
}

}  // namespace hyb
