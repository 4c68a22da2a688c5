// Flash attention on Hopper warpgroup MMA (attention.md 4.7), head dim 64: the forward, and the
// main kernel of the backward (the preprocess, the dQ convert and the deterministic dQ kernel are
// those of flash_attention_backward.cu). flash_attention_forward / _backward pick these when they
// apply; the mma.sync kernels remain the path for every other shape and GPU.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "layers/softmax_attention/flash_attention.cuh"

namespace hyb::flash {

// True when this build carries the sm_90a kernels, the current device is compute capability 9.0,
// and the call has D = Dv = 64 with 16-byte aligned rows.
bool sm90_forward_applies(const FlashAttentionForwardParams& p);
bool sm90_backward_applies(const FlashAttentionBackwardParams& p);

// Writes o and lse, as flash_attention_forward.
cudaError_t flash_forward_sm90(const FlashAttentionForwardParams& p, cudaStream_t stream);

// dK, dV (and dscale_h when asked); adds dQ into the fp32 accumulator dq_acc (zeroed, tiled as
// flash_dq_convert_sm90 reads it, sm90_dq_acc_floats long) unless p.deterministic. di: the
// preprocess's row terms, (B, Hq, Tq).
cudaError_t flash_backward_sm90_main(const FlashAttentionBackwardParams& p, float* dq_acc, const float* di,
                                     cudaStream_t stream);

// Floats of the tiled dQ accumulator: (B, Hq, ceil(Tq / 64)) tiles of 64 x 64.
size_t sm90_dq_acc_floats(const FlashAttentionBackwardParams& p);

// dq = bf16(dq_acc) from the tiled accumulator the wgmma main kernel filled.
cudaError_t flash_dq_convert_sm90(const FlashAttentionBackwardParams& p, const float* dq_acc, cudaStream_t stream);

}  // namespace hyb::flash
