// Host/device annotation for the few functions both sides compile (Philox, bf16 rounding, index math).
#pragma once
#ifdef __CUDACC__
#define HYB_HD __host__ __device__ __forceinline__
#else
#define HYB_HD inline
#endif
