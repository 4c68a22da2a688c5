// The core op of Gated Slot Attention, golden op `gsa` (gsa.md 2, 3): per batch element and query
// head h, with kv head j = h / G (G = Hq / Hkv) and gam_t = exp(g_t) over the M slots,
//   Hk_t = Hk_{t-1} .*c gam_t + outer(k_t, s_t)       (K x M, key slot memory)
//   Hv_t = gam_t .*r Hv_{t-1} + outer(s_t, v_t)       (M x V, value slot memory)
//   a_t  = softmax_M(scale Hk_t^T q_t),   o_t = Hv_t^T a_t
// i.e. two gated linear attentions sharing s and g, chained by a softmax over the slots. Both
// memories are per kv head; q, a and o per query head. Layout BTHD: q (B, T, Hq, K), k (B, T, Hkv, K),
// v (B, T, Hkv, V), s and g (B, T, Hkv, M), states Hk (B, Hkv, K, M), Hv (B, Hkv, M, V).
// The CPU form is the recurrent reference; on CUDA tensors gsa_forward / gsa_backward run the chunked
// kernels of gsa.md 4 (slot_attention_cuda.h, shared with nha: GSA is its window 0, shift 0 case); a
// bf16 forward within gsa_fused.h's envelope runs the fused tensor-core kernels instead.
//   GsaVars y = gsa(q, k, v, s, g, Var(), Var(), {});   // records the node
#pragma once
#include <optional>

#include "autograd/tape.h"

namespace hyb {

struct GsaParams {
  std::optional<double> scale;  // unset -> K^(-1/2) (the op default of gsa.md 2.3)
  // The fused CUDA path keeps its chunk-start memories (bf16, 2 (K M + M V) bytes per chunk and kv head:
  // 134 MB at B T 32768, Hkv 16, K = V = M = 64) for the backward instead of recomputing them (gsa.md 8
  // `save_chunk_states`).
  bool save_chunk_states = false;
};

struct GsaDims {
  int64_t B, T, Hq, Hkv, K, V, M;
  int64_t group;  // G = Hq / Hkv: query head h reads kv head h / G
};
GsaDims gsa_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                 const Tensor& Hk0, const Tensor& Hv0);

struct GsaOutputs {
  Tensor o;       // (B, T, Hq, V), dtype of q
  Tensor Hk, Hv;  // final memories (B, Hkv, K, M), (B, Hkv, M, V), the state dtype (g's)
};

struct GsaSaved {    // exactly what gsa_backward reads
  Tensor q;          // (B, T, Hq, K)
  Tensor k, v;       // (B, T, Hkv, K), (B, T, Hkv, V)
  Tensor s, g;       // (B, T, Hkv, M)
  Tensor Hk0, Hv0;   // initial memories or undefined (zeros)
  GsaParams params;
  Tensor lse;        // CUDA only: (B, T, Hq) f32 log normaliser of the slot softmax (gsa.md 4.8)
  // The fused path's chunk-start memories (B, Hkv, NC + 1, K, M), (B, Hkv, NC + 1, M, V) and chunk decays
  // (B, Hkv, NC, M), bf16 and f32, with params.save_chunk_states; else undefined (the records that do not
  // keep them leave them out of their braces).
  Tensor chunk_Hk{}, chunk_Hv{}, chunk_decay{};
  // Not saved: the memories of every token, T (K M + M V) per kv head, the slot logits and weights. The
  // CPU backward reruns the recurrence per (b, kv head) and keeps that head's states while it runs; the
  // CUDA backward recomputes the chunk-start states (unless kept) and rebuilds the softmax from lse.
};

struct GsaGrads {
  Tensor dq;              // (B, T, Hq, K)
  Tensor dk, dv, ds, dg;  // per kv head, summed over its G query heads
  Tensor dHk0, dHv0;      // only when the initial states were given
};

// needed: bit 0 q, 1 k, 2 v, 3 s, 4 g, 5 Hk0, 6 Hv0. dHk, dHv (final-state gradients) may be undefined.
GsaOutputs gsa_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                       const Tensor& Hk0, const Tensor& Hv0, const GsaParams& p, GsaSaved* saved);
GsaGrads gsa_backward(const GsaSaved& s, const Tensor& dout, const Tensor& dHk, const Tensor& dHv, GradMask needed);

struct GsaVars {
  Var o, Hk, Hv;
};
GsaVars gsa(const Var& q, const Var& k, const Var& v, const Var& s, const Var& g, const Var& Hk0, const Var& Hv0,
            const GsaParams& p);

// CPU reference (gsa_cpu.cpp).
GsaOutputs gsa_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                           const Tensor& Hk0, const Tensor& Hv0, double scale);
GsaGrads gsa_backward_cpu(const GsaSaved& s, const Tensor& dout, const Tensor& dHk, const Tensor& dHv,
                          GradMask needed);

}  // namespace hyb
