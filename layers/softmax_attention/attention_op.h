// The softmax-attention core op (specs attention.md 1-3; our notes in docs/layers/attention.md):
// causal GQA attention with an optional sliding window, fixed sink positions and a per-query-head
// scale. Layout BTHD; q, k, v may be strided views (a fused QKV buffer), last dimension contiguous.
// Returns o and the row log-sum-exp; the backward rebuilds P from lse instead of saving it.
//   AttentionParams p;  p.window = 512;  p.sinks = 64;
//   AttentionOutputs r = attention_forward(q, k, v, p, nullptr);   // r.o (B, T, Hq, Dv), r.lse (B, Hq, T)
//   Var o = attention(q_var, k_var, v_var, p);                      // records the node
#pragma once
#include <optional>

#include "autograd/tape.h"
#include "core/macros.h"

namespace hyb {

struct AttentionParams {
  std::optional<double> scale;  // softmax scale; unset -> 1/sqrt(D) (D of q/k, not Dv)
  Tensor scale_h;               // (Hq,) f32 or f64 per-query-head scale; when defined it replaces `scale`
  int64_t window = 0;           // w >= 0: the w most recent positions including self; 0 = unlimited
  int64_t sinks = 0;            // S >= 0: positions 0..S-1 stay visible to every later query
  // Atomic-free dQ in the CUDA backward (attention.md 4.2); the CPU reference is always deterministic.
  bool deterministic = false;
  // Launch order of the CUDA backward's key blocks (FlashAttentionBackwardParams::tail_heads): 0 lets
  // the kernels choose; the results do not depend on it beyond the order of dQ's fp32 atomic adds.
  int tail_heads = 0;
  // Tq and Tk come from the shapes of q and k: query i sits at position i + Tk - Tq (bottom-right).
};

// Sizes of one call, checked once by attention_dims (messages name the op and the shapes).
struct AttentionDims {
  int64_t B, Tq, Tk, Hq, Hkv, D, Dv;
  int64_t G;  // Hq / Hkv: query head h reads kv head h / G
};
AttentionDims attention_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionParams& p);
// The scalar scale in force when no scale_h is given.
double attention_scale(const AttentionParams& p, int64_t D);

// visible(p, j) of attention.md 1: key j is seen by the query at position p.
HYB_HD bool attention_visible(int64_t p, int64_t j, int64_t window, int64_t sinks) {
  return j <= p && (window == 0 || p - j < window || j < sinks);
}

// The visible keys of position p as two disjoint ranges: sinks [0, sink_end) and the window
// [lo, p]. Their union is exactly {j : attention_visible(p, j, window, sinks)}.
struct AttentionKeyRanges {
  int64_t sink_end, lo, hi;  // hi = p, inclusive
};
HYB_HD AttentionKeyRanges attention_key_ranges(int64_t p, int64_t window, int64_t sinks) {
  const int64_t lo = (window == 0 || p - window + 1 < 0) ? 0 : p - window + 1;
  return {sinks < lo ? sinks : lo, lo, p};
}

struct AttentionOutputs {
  Tensor o;    // (B, Tq, Hq, Dv) contiguous, dtype of q
  Tensor lse;  // (B, Hq, Tq) natural-log log-sum-exp per row: f32, f64 on the f64 CPU path
};

struct AttentionSaved {  // exactly what attention_backward reads
  Tensor q;              // (B, Tq, Hq, D) as given (a view, never copied)
  Tensor k;              // (B, Tk, Hkv, D)
  Tensor v;              // (B, Tk, Hkv, Dv)
  Tensor o;              // (B, Tq, Hq, Dv) forward output: Di = rowsum(dO o) - dlse (attention.md 3.1)
  Tensor lse;            // (B, Hq, Tq): P = exp(s - lse) is rebuilt from it
  AttentionParams params;
  // Not saved: S and P, (B, Hq, Tq, Tk) each; the backward recomputes them tile by tile.
};

struct AttentionGrads {
  Tensor dq;        // (B, Tq, Hq, D) contiguous
  Tensor dk;        // (B, Tk, Hkv, D), summed over the G query heads of each kv head
  Tensor dv;        // (B, Tk, Hkv, Dv), likewise
  Tensor dscale_h;  // (Hq,) dtype of scale_h: dL/dscale_h = sum over visible pairs of dS_ij <q_i, k_j>
};

// needed: bit 0 q, 1 k, 2 v, 3 scale_h (only with params.scale_h defined).
AttentionOutputs attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                                   AttentionSaved* saved);
// dlse (B, Hq, Tq) may be undefined (no gradient flows into lse).
AttentionGrads attention_backward(const AttentionSaved& s, const Tensor& dout, const Tensor& dlse,
                                  GradMask needed);

// The CPU reference (attention_cpu.cpp); the CUDA pair is declared in attention_cuda.h.
AttentionOutputs attention_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const AttentionParams& p);
AttentionGrads attention_backward_cpu(const AttentionSaved& s, const Tensor& dout, const Tensor& dlse,
                                      GradMask needed);

struct AttentionVars {
  Var o;    // (B, Tq, Hq, Dv)
  Var lse;  // (B, Hq, Tq)
};
Var attention(const Var& q, const Var& k, const Var& v, const AttentionParams& p);
AttentionVars attention_with_lse(const Var& q, const Var& k, const Var& v, const AttentionParams& p);
// Per-query-head scale as a differentiable input (the scaled-cosine path: scale_h = tau from
// logit_scale()); it replaces p.scale and p.scale_h.
AttentionVars attention_with_lse(const Var& q, const Var& k, const Var& v, const Var& scale_h,
                                 const AttentionParams& p);

}  // namespace hyb
