// The core op of Gated DeltaNet, golden op `gated_delta_rule` (gated_deltanet.md 1, 3.1-3.2, 4):
// per batch element and value head j, with q_t, k_t of head j / (HV / H) (unit vectors),
//   S'_t = exp(g_t) S_{t-1},  u_t = beta_t (v_t - S'_t^T k_t),  S_t = S'_t + outer(k_t, u_t),
//   o_t = scale S_t^T q_t,   S_0 = S0 or 0
// Layout BTHD: q, k (B, T, H, K), v (B, T, HV, V), beta and g (B, T, HV). beta may be exactly 0
// (NAtS-L's softmax-routed chunks): nothing divides by it. Two CPU forms with equal results: the
// recurrent reference and the chunked WY/UT form of the CUDA kernels (chunk_size > 0).
//   GatedDeltaOutputs r = gated_delta_rule_forward(q, k, v, beta, g, Tensor(), {}, nullptr);
//   GatedDeltaVars y = gated_delta_rule(q, k, v, beta, g, Var(), {});   // records the node
#pragma once
#include <optional>

#include "autograd/tape.h"

namespace hyb {

struct GatedDeltaParams {
  std::optional<double> scale;  // unset -> 1/sqrt(K)
  int64_t chunk_size = 0;       // 0: the recurrent form; C > 0: the chunked form with chunks of C tokens
  // The fused bf16 CUDA path keeps its forward's per-chunk W, U and chunk-start states for the
  // backward (GatedDeltaChunkScratch) instead of rebuilding them there; false trades that memory for
  // the rebuild (one W/U prepare and one forward scan, about a third of the fwd+bwd time measured,
  // and the triangular solve again in the backward, another ~10%).
  bool save_chunk_states = true;
};

// What the fused bf16 forward computes per chunk of 64 tokens and its backward reads again
// (gated_deltanet.md 4.3-4.5): 3 x 67 MB + 134 MB per layer at B T = 32768, HV 16, K = V = 64.
struct GatedDeltaChunkScratch {
  Tensor W;  // (B, HV, NC, 64, K) bf16: Ainv @ (beta gam .* K)
  Tensor U;  // (B, HV, NC, 64, V) bf16: U = Ainv @ (beta .* V) - W @ S_c
  Tensor S;  // (B, HV, NC, K, V) bf16: the chunk-start states S_c
  // (B, HV, NC, 2, 64, 64) bf16: the fp32 Ainv of the chunk as high and low bf16 parts, the form the
  // backward's products take; only the forward's keep fills it (the backward's own rebuild, without
  // save_chunk_states, solves again inside its stage 2-3 kernel).
  Tensor Ainv;
  // (B HV, nseg, 2, K, K) bf16 when the forward scan ran in segments (ScanPlan): each inner segment's
  // transition Phi_s, high and low parts. The backward's transitions over the same segments are these
  // transposed, so its scan takes the forward's segments and skips forming its own. Else undefined.
  Tensor Phi;
};

struct GatedDeltaDims {
  int64_t B, T, H, HV, K, V;
  int64_t v_per_qk;  // HV / H: value head j reads q and k of head j / v_per_qk
};
GatedDeltaDims gated_delta_rule_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& beta, const Tensor& g, const Tensor& S0);

struct GatedDeltaOutputs {
  Tensor o;            // (B, T, HV, V), dtype of q
  Tensor final_state;  // (B, HV, K, V), the state dtype (g's)
};

struct GatedDeltaSaved {  // exactly what gated_delta_rule_backward reads
  Tensor q, k;            // (B, T, H, K)
  Tensor v;               // (B, T, HV, V)
  Tensor beta, g;         // (B, T, HV)
  Tensor S0;              // (B, HV, K, V) or undefined (zeros)
  GatedDeltaParams params;
  GatedDeltaChunkScratch chunks;  // the fused CUDA path's, with params.save_chunk_states; else undefined
  // Not saved otherwise: the states, T x K x V per head. The recurrent backward recomputes them from
  // checkpoints every kGatedDeltaCheckpoint tokens (I - beta k k^T is singular at beta = 1, so the
  // recurrence cannot be run backwards); the chunked ones recompute the chunk-start states.
};

struct GatedDeltaGrads {
  Tensor dq, dk;      // (B, T, H, K), summed over the value heads that read each q/k head
  Tensor dv;          // (B, T, HV, V)
  Tensor dbeta, dg;   // (B, T, HV)
  Tensor dS0;         // (B, HV, K, V)
};

// needed: bit 0 q, 1 k, 2 v, 3 beta, 4 g, 5 S0. dfinal may be undefined (the state is unused).
GatedDeltaOutputs gated_delta_rule_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                           const Tensor& g, const Tensor& S0, const GatedDeltaParams& p,
                                           GatedDeltaSaved* saved);
GatedDeltaGrads gated_delta_rule_backward(const GatedDeltaSaved& s, const Tensor& dout, const Tensor& dfinal,
                                          GradMask needed);

struct GatedDeltaVars {
  Var o, final_state;
};
GatedDeltaVars gated_delta_rule(const Var& q, const Var& k, const Var& v, const Var& beta, const Var& g, const Var& S0,
                                const GatedDeltaParams& p);

// The CPU forms: recurrent (gated_delta_rule_cpu.cpp) and chunked (gated_delta_rule_chunked_cpu.cpp).
// The CUDA path is gated_delta_rule_*_kernels (gated_delta_rule_kernels.cpp): the chunk-toolkit
// sequence, always chunks of 64 tokens whatever chunk_size says (0 included), f32 or bf16 q, k, v with
// f32 beta, g and states; on CPU tensors it runs the toolkit's loop twins (tests only).
constexpr int64_t kGatedDeltaCheckpoint = 64;
GatedDeltaOutputs gated_delta_rule_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                               const Tensor& g, const Tensor& S0, double scale);
GatedDeltaGrads gated_delta_rule_backward_cpu(const GatedDeltaSaved& s, const Tensor& dout, const Tensor& dfinal,
                                              GradMask needed);
GatedDeltaOutputs gated_delta_rule_chunked_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Tensor& beta, const Tensor& g, const Tensor& S0,
                                                       double scale, int64_t chunk);
GatedDeltaGrads gated_delta_rule_chunked_backward_cpu(const GatedDeltaSaved& s, const Tensor& dout,
                                                      const Tensor& dfinal, GradMask needed);
GatedDeltaOutputs gated_delta_rule_forward_kernels(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& beta, const Tensor& g, const Tensor& S0, double scale);
GatedDeltaGrads gated_delta_rule_backward_kernels(const GatedDeltaSaved& s, const Tensor& dout, const Tensor& dfinal,
                                                  GradMask needed);
// The fused bf16 CUDA path (gated_delta_rule_forward.cu, gated_delta_rule_backward.cu): tensor-core
// kernels per chunk of 64 tokens around a sequential fp32 scan of the chunk states, taken when
// supported says so (bf16 on CUDA, K <= 128, K and V multiples of 8, B HV <= 65535 and the shared-memory
// tiles fit);
// otherwise the toolkit sequence above runs. HYBRID_GDN_FUSED=0 in the environment turns it off.
bool gated_delta_rule_fused_supported(const Tensor& q, const GatedDeltaDims& d);
// keep, when not null, receives the per-chunk scratch for the backward.
GatedDeltaOutputs gated_delta_rule_forward_fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                                 const Tensor& g, const Tensor& S0, double scale,
                                                 GatedDeltaChunkScratch* keep);
GatedDeltaGrads gated_delta_rule_backward_fused(const GatedDeltaSaved& s, const Tensor& dout, const Tensor& dfinal,
                                                GradMask needed);
// The one-token forward on CUDA (gated_delta_rule_decode.cu): one kernel on the state, the decode step.
GatedDeltaOutputs gated_delta_rule_decode_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                               const Tensor& g, const Tensor& S0, double scale);

}  // namespace hyb
