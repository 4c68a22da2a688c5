// Hopper (sm_90) tensor memory accelerator: tiles copied from global to shared memory by one thread,
// their arrival counted on a shared-memory mbarrier that the readers wait on. The copies are
// async-proxy writes, so wgmma may read the tile once the barrier's phase completes, with no
// fence.proxy.async (which SASS implements as MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S and which waits
// for the thread's outstanding global reductions).
// Host side: tensor maps (CUtensorMap) describe a strided global tensor and the box one copy moves;
// rows past a dimension's extent arrive as zeros. They are encoded through the driver entry point
// the runtime hands out (cudaGetDriverEntryPointByVersion, CUDA 12.5 on), so nothing links libcuda.
#pragma once
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace hyb::tma {

// --- device ---------------------------------------------------------------------------------

// mbarrier at shared address `bar` expecting `count` arrivals per phase; one thread, before a
// barrier that publishes it to the other threads.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// This thread's arrival, announcing `bytes` more to come from copies completing on the barrier.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the barrier's phase of parity `phase` has completed (its k-th use waits for k % 2).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t phase) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(phase)
      : "memory");
}
// The box of `map` at coordinates (c0 innermost, ...) into shared memory at `dst` (128-byte aligned;
// 1024 for a 128B-swizzled map), completing `bytes` of the barrier's transaction count.
__device__ __forceinline__ void load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(
          dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2,
                                        int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// --- host -----------------------------------------------------------------------------------

// cuTensorMapEncodeTiled, or null where the driver does not offer it.
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return PFN_cuTensorMapEncodeTiled_v12000(nullptr);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A map of `rank` dimensions (extent[0] innermost and contiguous; stride_bytes[i] the step of
// dimension i + 1) copying boxes of `box`; false where the driver refuses it (strides not multiples
// of 16 bytes, a misaligned base), and the caller takes its other path.
inline bool encode(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base, const uint64_t* extent,
                   const uint64_t* stride_bytes, const uint32_t* box, CUtensorMapSwizzle swizzle) {
  // The driver's own rules for a tiled map, checked first so that a refusal is not an API error
  // (compute-sanitizer reports those).
  if (reinterpret_cast<uintptr_t>(base) % 16) return false;
  for (int i = 0; i + 1 < rank; ++i)
    if (stride_bytes[i] % 16 || stride_bytes[i] >= (uint64_t(1) << 40)) return false;
  for (int i = 0; i < rank; ++i)
    if (extent[i] == 0 || extent[i] > (uint64_t(1) << 32) || box[i] == 0 || box[i] > 256) return false;
  const PFN_cuTensorMapEncodeTiled_v12000 fn = encode_tiled();
  if (!fn) return false;
  const uint32_t unit[5] = {1, 1, 1, 1, 1};
  return fn(map, type, cuuint32_t(rank), const_cast<void*>(base), extent, stride_bytes, box, unit,
            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace hyb::tma
