// Element conversion on the device among the six tensor dtypes, the same function as the host's
// convert<To>(from) in core/dispatch.h: bf16 goes through float, everything else is a static_cast.
// Float to integer truncates toward zero; out-of-range values are undefined on both sides, as in C++.
//   dst[i] = device_convert<Dst>(src[i]);
#pragma once
#include <type_traits>

#include "kernels/bf16.cuh"

namespace hyb {

template <typename To, typename From>
__device__ __forceinline__ To device_convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, bf16>) {
    return device_convert<To>(bf16_to_float(v.bits));
  } else if constexpr (std::is_same_v<To, bf16>) {
    return float_to_bf16(float(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace hyb
