// 16-byte vector loads and stores: a Pack of N elements moves in one instruction (LDG.128 / STG.128)
// when its address is 16-byte aligned. Launchers check alignment once on the host and fall back to
// scalar code otherwise; the caching allocator's 512-byte blocks make the aligned path the usual one.
//   using P = Pack<float, kPack16<float>>;            // 4 floats
//   P v = load_pack<P>(x + 4 * i); ...; store_pack(y + 4 * i, v);
#pragma once
#include <cstddef>
#include <cstdint>

namespace hyb {

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  static constexpr int kSize = N;
  T v[N];
};

// Elements of T in 16 bytes.
template <typename T>
inline constexpr int kPack16 = int(16 / sizeof(T));

template <typename P, typename T>
__device__ __forceinline__ P load_pack(const T* p) {
  return *reinterpret_cast<const P*>(p);
}

template <typename P, typename T>
__device__ __forceinline__ void store_pack(T* p, const P& v) {
  *reinterpret_cast<P*>(p) = v;
}

inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace hyb
