// The decode step of Native Hybrid Attention (nha.md 9): T >= 1 new tokens, one after another, on a
// carried state updated in place. For the token at position P:
//   1. the token at P - shift enters the slot memories (HK, HV) with its gates (nha.md 2.1); it is
//      read from the ring (shift > 0) or is the token itself (shift 0); shift -1: none ever does.
//      With slot_silu the slots see silu(k) and silu(q) (nha.md 8.5); the ring keeps k raw
//   2. the token goes to ring slot P % R (k raw, v, and s, g while a later step still absorbs them)
//   3. a = scale q^T HK;  b_j = scale <RoPE(q, P), RoPE(k_j, j)> + bias[h, P - j] for the window keys
//      max(0, P - window + 1) <= j <= P, read from the ring and rotated at their stored positions
//   4. one softmax over [a ; b]: o = p^T HV + sum_j r_j v_j  (split: two softmaxes, one per branch)
// Ring: R = ring_k.size(1) >= max(window, shift); with an unlimited window (-1) it is a KV cache
// holding every position (R >= pos + T). Layout BTHD as the nha op (nha_op.h); GQA reads kv head
// h / (Hq / Hkv). Forward only: decoding records no tape. CPU reference in nha_decode_cpu.cpp, the
// CUDA kernel in nha_decode.cu; both keep the state in the state dtype (f32 for bf16 inputs).
//   NhaDecodeState st{HK, HV, ring_k, ring_v, ring_s, ring_g};
//   NhaDecodeParams p;  p.window = 32;  p.shift = 32;  p.pos = n_seen;
//   NhaDecodeOutputs y = nha_decode_step(q, k, v, s, g, Tensor(), &table, st, p);   // y.o (B, T, Hq, Dv)
#pragma once
#include <optional>

#include "core/tensor.h"
#include "layers/rope/rope_op.h"

namespace hyb {

struct NhaDecodeState {  // updated in place; every tensor contiguous
  Tensor HK, HV;          // (B, Hkv, D, M), (B, Hkv, M, Dv) state dtype; undefined when M = 0
  Tensor ring_k, ring_v;  // (B, R, Hkv, D), (B, R, Hkv, Dv) dtype of k; undefined when R = 0
  Tensor ring_s, ring_g;  // (B, R, Hkv, M) state dtype; only with slots and shift > 0
};

struct NhaDecodeParams {
  std::optional<double> scale;  // unset -> D^(-1/2), for slot and window logits alike
  int64_t window = 32;          // keys counting the current token; 0: no window; -1: every past token
  int64_t shift = 32;           // the memory read at P holds tokens <= P - shift; -1: no token ever
  int64_t pos = 0;              // absolute position of the first new token (tokens already seen)
  bool split = false;           // weighted fusion (nha.md 8.2): slot and window branches softmaxed apart
  bool slot_silu = false;       // slot_feature_map swish (nha.md 8.5): silu on the slots' q and written k
  bool long_ratio = false;      // also return omega_L = sum_i p_i (joint softmax only)
};

struct NhaDecodeOutputs {
  Tensor o;           // (B, T, Hq, Dv) dtype of q: the joint output, or the slot branch when split (undefined: M = 0)
  Tensor o_window;    // split only: the window branch (undefined without a window)
  Tensor long_ratio;  // (B, T, Hq) state dtype when asked for
};

struct NhaDecodeDims {
  int64_t B, T, Hq, Hkv, D, Dv, M, R;
  int64_t group;  // Hq / Hkv
};
NhaDecodeDims nha_decode_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                              const Tensor& bias, const RopeTable* rope, const NhaDecodeState& st,
                              const NhaDecodeParams& p);

// rope: the window's RoPE table (nullptr: no RoPE); the CUDA kernel reads its cos/sin rows, which
// must cover pos + T positions on the device; the CPU turns by fp64 angles from inv_freq.
NhaDecodeOutputs nha_decode_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                                 const Tensor& bias, const RopeTable* rope, NhaDecodeState& st,
                                 const NhaDecodeParams& p);

NhaDecodeOutputs nha_decode_step_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s,
                                     const Tensor& g, const Tensor& bias, const RopeTable* rope, NhaDecodeState& st,
                                     const NhaDecodeParams& p);
#if HYBRID_CUDA
NhaDecodeOutputs nha_decode_step_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s,
                                      const Tensor& g, const Tensor& bias, const RopeTable* rope, NhaDecodeState& st,
                                      const NhaDecodeParams& p);
#endif

}  // namespace hyb
