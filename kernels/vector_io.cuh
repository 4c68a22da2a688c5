// 16-byte vector loads and stores: a Pack of N elements moves in one instruction (LDG.128 / STG.128)
// when its address is 16-byte aligned. Launchers check alignment once on the host and fall back to
// scalar code otherwise; the caching allocator's 512-byte blocks make the aligned path the usual one.
//   using P = Pack<float, kPack16<float>>;            // 4 floats
//   P v = load_pack<P>(x + 4 * i); ...; store_pack(y + 4 * i, v);
//   float f[8]; load_f32(x + 8 * i, f); ... store_f32(y + 8 * i, f);  // bf16 or f32 in memory, fp32 math
//   Pack<bf16, 8> raw = load_pack<Pack<bf16, 8>>(x); ...; unpack_f32(raw, f);  // held as bf16 until used
//   const int V = pack_width<T>(C, {x, y});  // kPack16<T> or 1: a kernel templated on V serves both
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kernels/convert.cuh"

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

// Conversions through device_convert, so a packed kernel rounds exactly as its scalar form does.
// pack_f32 keeps the rounded pack for a kernel that also reads back what it stores.
template <typename T, int N>
__device__ __forceinline__ Pack<T, N> pack_f32(const float (&f)[N]) {
  Pack<T, N> p;
#pragma unroll
  for (int i = 0; i < N; ++i) p.v[i] = device_convert<T>(f[i]);
  return p;
}

// A pack kept in its storage type (half the registers of fp32 for bf16) converted where it is used.
template <typename T, int N>
__device__ __forceinline__ void unpack_f32(const Pack<T, N>& p, float (&f)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) f[i] = device_convert<float>(p.v[i]);
}

// N elements to or from fp32 registers in 16-byte packs (N larger than a pack, e.g. 8 floats next to 8
// bf16, moves as several packs, so only 16-byte alignment is needed).
template <typename T, int N>
__device__ __forceinline__ void load_f32(const T* p, float (&f)[N]) {
  constexpr int M = N < kPack16<T> ? N : kPack16<T>;
  static_assert(N % M == 0, "load_f32: N must be a multiple of the pack");
#pragma unroll
  for (int k = 0; k < N; k += M) {
    const Pack<T, M> q = load_pack<Pack<T, M>>(p + k);
#pragma unroll
    for (int i = 0; i < M; ++i) f[k + i] = device_convert<float>(q.v[i]);
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_f32(T* p, const float (&f)[N]) {
  constexpr int M = N < kPack16<T> ? N : kPack16<T>;
  static_assert(N % M == 0, "store_f32: N must be a multiple of the pack");
#pragma unroll
  for (int k = 0; k < N; k += M) {
    Pack<T, M> q;
#pragma unroll
    for (int i = 0; i < M; ++i) q.v[i] = device_convert<T>(f[k + i]);
    store_pack(p + k, q);
  }
}

inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The pack width a kernel over rows of `inner` elements may use: kPack16<T> when `inner` is a multiple
// of it and every pointer (null ones are absent outputs) is 16-byte aligned, else 1 (scalar).
template <typename T>
int pack_width(int64_t inner, std::initializer_list<const void*> ptrs) {
  if (inner % kPack16<T> != 0) return 1;
  for (const void* p : ptrs)
    if (!is_aligned(p, 16)) return 1;
  return kPack16<T>;
}

}  // namespace hyb
