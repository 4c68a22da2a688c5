// The fused bf16 CUDA path of the gsa op (gsa.md 4.8): tensor-core kernels per chunk of 64 tokens, the
// forward F1 + F2 (gsa_fused_forward.cu) and the backward B0..B3 (gsa_fused_backward.cu). The forward
// returns the slot-softmax log normaliser lse (saved in GsaSaved), from which the backward rebuilds P.
// Taken for bf16 q, k, v on CUDA with K, V <= 128 (multiples of 8) and M <= 64, any GQA group;
// HYBRID_GSA_FUSED=0 turns it off (A/B timing, bisecting a mismatch).
//   if (gsa_fused_supported(q, d)) { GsaFusedOut y = gsa_forward_fused(q, k, v, s, g, Hk0, Hv0, scale); }
//   GsaGrads gr = gsa_backward_fused(saved, dout, dHk, dHv, needed);
#pragma once
#include "layers/gsa/gsa_op.h"

namespace hyb {

struct GsaFusedOut {
  Tensor o;       // (B, T, Hq, V) bf16
  Tensor Hk, Hv;  // final memories (B, Hkv, K, M), (B, Hkv, M, V) f32
  Tensor lse;     // (B, T, Hq) f32: max_m z + log sum_m exp(z - max_m z) of every row
  Tensor chunk_Hk, chunk_Hv, chunk_decay;  // with keep_states: GsaSaved's (gsa_op.h)
};

bool gsa_fused_supported(const Tensor& q, const GsaDims& d);
GsaFusedOut gsa_forward_fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                              const Tensor& Hk0, const Tensor& Hv0, double scale, bool keep_states = false);
// dq, dk, dv in bf16, ds, dg and the initial-memory gradients in f32. saved.lse: the fused forward's (if
// undefined, the forward runs again for it); saved.chunk_Hk, chunk_Hv, chunk_decay: its kept chunk
// memories (if undefined, recomputed: the same bits). dHk, dHv: final-memory gradients (f32) or undefined.
// delta: (B, T, Hq) f32 contiguous rowsum(dO .* O) when the slots share their softmax with other logits
// (nha's window; saved.lse is then the joint one), else undefined (the slots' own rowsum(P .* dP)).
// shift (nha's token shift, needs saved.lse): the slots read k, v, s, g moved down by shift rows, zeros in
// front, read in place (gsa_fused.cuh Dims); dk, dv, ds, dg are at the tokens' rows, 0 on the last shift.
GsaGrads gsa_backward_fused(const GsaSaved& saved, const Tensor& dout, const Tensor& dHk, const Tensor& dHv,
                            GradMask needed, const Tensor& delta = Tensor(), int64_t shift = 0);

}  // namespace hyb
