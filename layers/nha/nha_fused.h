// The fused bf16 CUDA forward of the nha op (nha.md 2, gsa.md 4.8), built on the fused gsa kernels
// (layers/gsa/gsa_fused.cuh): the slot memories are gsa's F1 + chunk scan over the token stream shifted
// by `shift` (token u - shift at position u, zero gates before: query t then reads the memory after
// token t - shift, and the final memory is the one the last query sees), and the output kernel is gsa's
// F2 with the window keys of every query (the previous chunk and its own, window <= 64) in the same
// softmax. It returns o and the joint log normaliser lse, the same quantities as the slot-attention path,
// whose backward (slot_attention_backward_cuda) consumes them. Taken for bf16 with 1 <= window <= 64,
// 1 <= M <= 64, D, Dv <= 128 (multiples of 8), any GQA group and no long-ratio statistic;
// HYBRID_NHA_FUSED=0 turns it off.
//   if (nha_fused_supported(q, d, p)) { NhaFusedOut y = nha_forward_fused(a); }
#pragma once
#include "layers/gsa/slot_attention_cuda.h"
#include "layers/nha/nha_op.h"

namespace hyb {

struct NhaFusedOut {
  Tensor o;       // (B, T, Hq, Dv) bf16
  Tensor HK, HV;  // the memory seen by the last query (B, Hkv, D, M), (B, Hkv, M, Dv) f32
  Tensor lse;     // (B, T, Hq) f32: log normaliser of each query's joint softmax (slots and window)
};

bool nha_fused_supported(const Tensor& q, const NhaDims& d, const NhaParams& p);
// a: the slot-attention arguments of the op (window and shift resolved, qr and kr the window side).
NhaFusedOut nha_forward_fused(const SlotAttentionArgs& a);

}  // namespace hyb
