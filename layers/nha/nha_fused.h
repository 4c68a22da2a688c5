// The fused bf16 CUDA forward of the nha op (nha.md 2, gsa.md 4.8), built on the fused gsa kernels
// (layers/gsa/gsa_fused.cuh): the slot memories are gsa's F1 + chunk scan over the token stream shifted
// by `shift`, read in place (token u - shift at position u, zero gates before: query t then reads the
// memory after token t - shift, and the final memory is the one the last query sees), and the output
// kernel is gsa's F2 with the window keys of every query (the previous chunk and its own, window <= 64)
// in the same softmax. It returns o and the joint log normaliser lse, the same quantities as the slot-attention path.
// The backward splits the joint softmax by its logits: the slot side is gsa's fused backward B0..B3 on
// the shifted stream, given the joint lse and delta = rowsum(dO .* O) (nha_slot_backward_fused); the
// window side is the slot-attention backward without slots (M = 0) on the same lse and o, whose chunk
// kernels take delta from o too (dqr per query tile, dkr and dv key-major: no atomics). Without a bias
// and at D, Dv <= 64 (nha_window_fused), the window's dqr, dkr and dv come from two window kernels
// (nha_window_grads_fused) on the fused path's delta.
// Taken for bf16 with 1 <= window <= 64, 1 <= M <= 64, D, Dv <= 128 (multiples of 8), any GQA group
// (the forward not for the long-ratio statistic); HYBRID_NHA_FUSED=0 turns it off.
//   if (nha_fused_supported(q, d)) { NhaFusedOut y = nha_forward_fused(a); }
#pragma once
#include "layers/gsa/gsa_op.h"
#include "layers/gsa/slot_attention_cuda.h"
#include "layers/nha/nha_op.h"
#include "layers/rope/rope_op.h"

namespace hyb {

struct NhaFusedOut {
  Tensor o;       // (B, T, Hq, Dv) bf16
  Tensor HK, HV;  // the memory seen by the last query (B, Hkv, D, M), (B, Hkv, M, Dv) f32
  Tensor lse;     // (B, T, Hq) f32: log normaliser of each query's joint softmax (slots and window)
  Tensor chunk_HK, chunk_HV, chunk_decay;  // with keep_states: NhaSaved's (nha_op.h)
};

bool nha_fused_supported(const Tensor& q, const NhaDims& d);
// a: the slot-attention arguments of the op (window and shift resolved, qr and kr the window side).
NhaFusedOut nha_forward_fused(const SlotAttentionArgs& a, bool keep_states = false);
// The slot side of the backward at the unshifted token positions: dq (raw q), dk, dv (bf16), ds, dg and
// the initial-memory gradients (f32). lse, o: the forward's; dHK, dHV: final-memory gradients or undefined.
// delta = rowsum(dO .* O) (B, T, Hq) f32, which the window side needs too.
struct NhaSlotGrads {
  GsaGrads slot;
  Tensor delta;
};
bool nha_window_fused(const SlotAttentionArgs& a);
// With nha_window_fused(a), the window's gradients: dqr, dkr (the rotated queries' and keys') and the
// window part of dv, f32, from the joint lse and the slot side's delta (nha_window_dq_kernel query-major,
// nha_window_kv_kernel key-major: no atomics).
SlotAttentionGrads nha_window_grads_fused(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& delta,
                                          const Tensor& dout);
// The same kernels writing dq, dk, dv whole in one pass: the slot side's bf16 gradients (slot.dq, dk, dv)
// plus the window's, turned back through RoPE (rope: the window's table, token t at position offset + t;
// null for none), rounded once to bf16, where nha_add_window_grad would take three more passes. Taken
// when the window shares q and k with the slots and nha_window_sum_fused_ok (RoPE over all of D = 64, or
// none).
struct NhaWindowSum {
  Tensor dq, dk, dv;  // (B, T, Hq, D), (B, T, Hkv, D), (B, T, Hkv, Dv) bf16
};
bool nha_window_sum_fused_ok(const SlotAttentionArgs& a, const RopeTable* rope);
NhaWindowSum nha_window_sum_fused(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& delta,
                                  const Tensor& dout, const GsaGrads& slot, const RopeTable* rope, int64_t offset);
// bf16(base + the window gradient win turned back through RoPE): one pass where a cast, the rotation, an
// fp32 add and a cast back would be four. base (B, T, H, D) bf16, win f32, both contiguous; rope null for
// none (dv), else the window's table with token t at position offset + t.
Tensor nha_add_window_grad(const Tensor& base, const Tensor& win, const RopeTable* rope, int64_t offset);
// kept: the forward's chunk memories (NhaSaved::chunk_HK, ...; undefined: recomputed, the same bits).
NhaSlotGrads nha_slot_backward_fused(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& o,
                                     const Tensor& dout, const Tensor& dHK, const Tensor& dHV, const NhaSaved& kept);

}  // namespace hyb
