// The core op of Native Hybrid Attention, golden op `nha` (nha.md 2, 4): a gated slot memory (the
// gsa recurrence, gsa.md 2.1) and a sliding window of recent tokens, read by ONE softmax:
//   memory seen by query t: GK_{t-shift}, GV_{t-shift} = the gsa memories after absorbing token
//                           t - shift (the initial memories while t < shift)
//   a_t,i = scale <q_t, MK_t[:, i]>                         i < M       (raw q, k)
//   b_t,j = scale <q~_t, k~_j> + bias[h, t - j]             t - W < j <= t, j >= 0
//   [p ; r] = softmax([a ; b]),  o_t = p^T MV_t + sum_j r_j v_j
// with q~, k~ = RoPE(q, k) at their absolute positions (rope_offset + t) when `rope` is set.
// The paper's NHA is shift = window = w (token shift: a token enters the memory when it leaves
// the window); shift = 0 is the "w/o token shift" ablation; window = 0 with shift = 0 is GSA;
// window = -1 (or >= T) is full attention plus M slots that never receive a token. M = 0 (s and g
// undefined) is sliding-window attention. Layout BTHD: q (B, T, Hq, D), k (B, T, Hkv, D),
// v (B, T, Hkv, Dv), s and g (B, T, Hkv, M), memories HK (B, Hkv, D, M), HV (B, Hkv, M, Dv),
// bias (Hq, nb) with nb >= min(W, T). GQA: query head h reads kv head h / (Hq / Hkv).
// The CPU form is the recurrent reference of nha.md 2.8 and 4; on CUDA tensors nha_forward /
// nha_backward run the slot-attention kernels shared with gsa (layers/gsa/slot_attention_cuda.h)
// (bf16 with window <= 64 takes the fused kernels of layers/nha/nha_fused.h):
// chunked slot memory, slot and window logits of a query normalised by one online softmax.
// Optional q_window, k_window (shapes of q, k) give the window branch its own q and k; q and k then
// serve the slots only (a slot feature map, nha.md 8.5).
//   NhaParams p; p.window = 32; p.shift = 32;
//   NhaVars y = nha(q, k, v, s, g, Var(), Var(), Var(), p);
#pragma once
#include <optional>

#include "autograd/tape.h"
#include "layers/rope/rope_op.h"

namespace hyb {

struct NhaParams {
  std::optional<double> scale;  // unset -> D^(-1/2), for slot and window logits alike
  int64_t window = 32;          // W keys counting the current one; 0: no window; -1: unlimited (full)
  int64_t shift = 32;           // the memory at query t holds tokens <= t - shift; -1: never any token
  bool rope = true;             // RoPE on the window's q and k (rotate-half, nha.md 2.4)
  double rope_theta = 10000.0;
  int64_t rope_offset = 0;      // absolute position of row 0 (decoding from a ring of past tokens)
  // The caller's table at rope_theta (a layer keeps one): the CUDA path otherwise builds one per call on the host,
  // T x D/2 cosines and sines in fp64 plus a copy, which at T = 16k costs more than the kernels.
  std::optional<RopeTable> rope_table;
  bool long_ratio = false;      // also return omega_L = sum_i p_t,i (nha.md 2.6)
  // The fused CUDA path keeps its chunk-start memories for the backward instead of recomputing them, as
  // gsa's (gsa_op.h): bf16, 2 (D M + M Dv) bytes per 64 tokens and kv head (67 MB at B T 32768, Hkv 16,
  // D = Dv = 64, M = 32).
  bool save_chunk_states = false;
  // The CUDA path keeps the window's RoPE'd q and k (the shapes of q and k, their dtype) for the backward
  // instead of rotating them again: two passes over q and k fewer for their size in activations.
  bool save_window_qk = false;
};

struct NhaDims {
  int64_t B, T, Hq, Hkv, D, Dv, M;
  int64_t group;     // Hq / Hkv
  int64_t window;    // resolved: 0..T (T for unlimited)
  int64_t shift;     // resolved: 0..T (T: no token ever enters the memory)
};
NhaDims nha_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                 const Tensor& HK0, const Tensor& HV0, const Tensor& bias, const NhaParams& p);

struct NhaOutputs {
  Tensor o;           // (B, T, Hq, Dv), dtype of q
  Tensor HK, HV;      // the memory seen by the last query (nha.md 2.7), state dtype; undefined when M = 0
  Tensor long_ratio;  // (B, T, Hq) omega_L when asked for; a statistic without gradient
};

struct NhaSaved {        // exactly what nha_backward reads
  Tensor q;              // (B, T, Hq, D)
  Tensor k, v;           // (B, T, Hkv, D), (B, T, Hkv, Dv)
  Tensor s, g;           // (B, T, Hkv, M) or undefined (M = 0)
  Tensor HK0, HV0;       // initial memories or undefined (zeros)
  Tensor bias;           // (Hq, nb) or undefined
  Tensor q_window, k_window;  // the window branch's own q, k, or undefined (it reads q, k)
  NhaParams params;
  Tensor lse;            // CUDA only: (B, T, Hq) f32 log normaliser of each query's joint softmax
  Tensor o;              // CUDA only: (B, T, Hq, Dv) the output, for delta = <dO, o> (nha.md 5.3)
  // The fused path's chunk-start memories and chunk decays with params.save_chunk_states (GsaSaved's, on
  // the shifted slot stream); else undefined.
  Tensor chunk_HK{}, chunk_HV{}, chunk_decay{};
  Tensor window_qr{}, window_kr{};  // CUDA with params.save_window_qk and a window: the rotated q and k; else undefined
  // Not saved: the logits, the softmax and the memories (T D M per kv head). The CPU backward reruns
  // the forward per (b, kv head); the CUDA backward recomputes the chunk-start memories (unless kept) and
  // rebuilds the probabilities from lse (nha.md 5.3).
};

struct NhaGrads {
  Tensor dq;                    // (B, T, Hq, D)
  Tensor dk, dv, ds, dg;        // per kv head, summed over its query heads
  Tensor dHK0, dHV0;            // when the initial memories were given
  Tensor dbias;                 // (Hq, nb), summed over b and t
  Tensor dq_window, dk_window;  // with q_window, k_window: the window branch's part (dq, dk then the slots')
};

// needed: bit 0 q, 1 k, 2 v, 3 s, 4 g, 5 HK0, 6 HV0, 7 bias, 8 q_window, 9 k_window. dHK, dHV may be
// undefined.
NhaOutputs nha_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                       const Tensor& HK0, const Tensor& HV0, const Tensor& bias, const NhaParams& p, NhaSaved* saved,
                       const Tensor& q_window = Tensor(), const Tensor& k_window = Tensor());
NhaGrads nha_backward(const NhaSaved& s, const Tensor& dout, const Tensor& dHK, const Tensor& dHV, GradMask needed);

struct NhaVars {
  Var o, HK, HV;
  Tensor long_ratio;  // undefined unless params.long_ratio
};
NhaVars nha(const Var& q, const Var& k, const Var& v, const Var& s, const Var& g, const Var& HK0, const Var& HV0,
            const Var& bias, const NhaParams& p, const Var& q_window = Var(), const Var& k_window = Var());

// The window branch's q and k: q_window, k_window when given (checked against q, k), else q, k.
struct NhaWindowSide {
  Tensor q, k;
  bool separate;  // given apart from the slots' q, k
};
NhaWindowSide nha_window_side(const char* op, const Tensor& q, const Tensor& k, const Tensor& q_window,
                              const Tensor& k_window);

// CPU reference (nha_cpu.cpp).
NhaOutputs nha_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                           const Tensor& HK0, const Tensor& HV0, const Tensor& bias, const NhaParams& p,
                           const Tensor& q_window = Tensor(), const Tensor& k_window = Tensor());
NhaGrads nha_backward_cpu(const NhaSaved& s, const Tensor& dout, const Tensor& dHK, const Tensor& dHV,
                          GradMask needed);

}  // namespace hyb
