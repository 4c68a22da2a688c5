// Flash attention on CUDA (attention.md 4): tiled online-softmax forward that saves the row
// log-sum-exp, and the backward that rebuilds P from it (Di preprocess, K/V-parallel main kernel
// over the G query heads of a kv group, fp32 dQ atomics, convert). bf16 operands on mma.sync tensor
// cores, fp32 accumulation. Plain pointers and strides, no Tensor: the op adapters
// (attention_cuda.cu) and the standalone experiment tools/flash_attention_dev.cu both call these.
//   FlashAttentionForwardParams p{...};  flash_attention_forward(p, stream);
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hyb {

// Element strides of the B, T and H dimensions of a (B, T, H, D) tensor; D has stride 1.
struct FlashStrides {
  int64_t b, t, h;
};

struct FlashAttentionForwardParams {
  const void* q;  // bf16 (B, Tq, Hq, D)
  const void* k;  // bf16 (B, Tk, Hkv, D)
  const void* v;  // bf16 (B, Tk, Hkv, Dv)
  void* o;        // bf16 (B, Tq, Hq, Dv): written by the forward, read by the backward
  float* lse;     // (B, Hq, Tq) contiguous, natural log: written by the forward, read by the backward
  FlashStrides q_stride, k_stride, v_stride, o_stride;
  int B, Tq, Tk, Hq, Hkv, D, Dv;
  float scale;           // logit scale used when scale_h is null
  const float* scale_h;  // (Hq,) per-query-head scale on the device, or null
  int window;            // w >= 0: the w most recent positions including self; 0 = unlimited
  int sinks;             // positions 0..sinks-1 stay visible to every later query
  // Launch order of the query-parallel kernels (forward, deterministic dQ): the CTAs of this many
  // query heads interleave, longest query blocks first, so the last wave holds only short CTAs;
  // 0 = as many heads as whose K and V fill half the L2 cache.
  int head_group;
};

struct FlashAttentionBackwardParams {
  FlashAttentionForwardParams fwd;  // q, k, v, o, lse as the forward saw and wrote them
  const void* dout;                 // bf16 (B, Tq, Hq, Dv)
  FlashStrides dout_stride;
  const float* dlse;  // (B, Hq, Tq) contiguous upstream gradient of lse, or null
  void* dq;           // bf16 (B, Tq, Hq, D)
  void* dk;           // bf16 (B, Tk, Hkv, D), summed over the G query heads of each kv head
  void* dv;           // bf16 (B, Tk, Hkv, Dv), likewise
  FlashStrides dq_stride, dk_stride, dv_stride;
  float* dscale_h;  // (Hq,) or null: set to dL/dscale_h = sum over visible pairs of dS_ij <q_i, k_j>
  // Bitwise reproducible dq and dscale_h: a separate dQ kernel instead of atomics (attention.md
  // 4.2; two more products per tile pair). dk and dv are reproducible either way.
  bool deterministic;
  // Launch order of the K/V-parallel kernel: head after head, key blocks ascending, but the CTAs of
  // the last tail_heads kv heads interleave (every such head's first key block, then the second...),
  // so the last waves hold the short causal blocks; 0 = the kernel's default (flash::key_block_order:
  // about four waves of the SMs in the one-warpgroup wgmma kernel, none elsewhere), -1 = none.
  int tail_heads;
};

// Null when the kernels take this call, else why not (D odd or over 256, Dv != D beyond the padded
// width, pointers or strides not 4-byte aligned, Hq not a multiple of Hkv, Tq > Tk).
const char* flash_attention_unsupported(const FlashAttentionForwardParams& p);

// Writes o and lse. Asynchronous on `stream`; returns the launch error, if any.
cudaError_t flash_attention_forward(const FlashAttentionForwardParams& p, cudaStream_t stream);

// Device bytes the backward needs as scratch: the fp32 dQ accumulator (unless deterministic), the
// row terms Di and, deterministic with dscale_h, per-block parts of dscale_h.
size_t flash_attention_backward_workspace_bytes(const FlashAttentionBackwardParams& p);

// Writes dq, dk, dv (and dscale_h when asked). `workspace` holds at least the bytes above, 256-byte
// aligned; its content on entry does not matter. Unless p.deterministic, dQ is summed with fp32
// atomics and dq/dscale_h may differ in the last bits from run to run.
cudaError_t flash_attention_backward(const FlashAttentionBackwardParams& p, void* workspace, cudaStream_t stream);

}  // namespace hyb
