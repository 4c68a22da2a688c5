// The SSD core of Mamba2, golden op `simple_gla` (mamba2.md 1, 3.1-3.2, 4): a linear recurrence
// with one scalar log decay per head and token, per batch element and head h,
//   S_t = exp(g_t) S_{t-1} + outer(k_t, v_t)   (K x V),   o_t = scale S_t^T q_t,   S_0 = S0 or 0
// Layout BTHD: q, k (B, T, Gq, K), v (B, T, H, V), g (B, T, H) <= 0; head h reads q and k of group
// h / (H / Gq) (Mamba2's shared B and C). Two CPU forms with equal results: the recurrent reference
// and the chunked form the CUDA kernels implement (SimpleGlaParams::chunk_size > 0).
//   SimpleGlaOutputs r = simple_gla_forward(q, k, v, g, Tensor(), {1.0, 0}, nullptr);   // r.o, r.final_state
//   SimpleGlaVars y = simple_gla(C, B, dt_x, A_dt, Var(), {1.0, 0});                    // records the node
#pragma once
#include <optional>

#include "autograd/tape.h"

namespace hyb {

struct SimpleGlaParams {
  std::optional<double> scale;  // unset -> 1/sqrt(K); Mamba2 uses 1
  int64_t chunk_size = 0;       // 0: the recurrent form; C > 0: the chunked form with chunks of C tokens
  // The fused CUDA path keeps the forward's bf16 chunk-start states for the backward (B H (T / 64 + 1)
  // K V bf16, 67 MB a layer at B T = 32768, 16 heads of 64 x 64) instead of computing them again.
  bool save_chunk_states = true;
};

struct SimpleGlaDims {
  int64_t B, T, Gq, H, K, V;
  int64_t heads_per_group;  // H / Gq
};
SimpleGlaDims simple_gla_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& S0);

struct SimpleGlaOutputs {
  Tensor o;            // (B, T, H, V), dtype of q
  Tensor final_state;  // (B, H, K, V), the state dtype (g's)
};

struct SimpleGlaSaved {  // exactly what simple_gla_backward reads
  Tensor q, k;           // (B, T, Gq, K)
  Tensor v;              // (B, T, H, V)
  Tensor g;              // (B, T, H)
  Tensor S0;             // (B, H, K, V) or undefined (zeros)
  SimpleGlaParams params;
  Tensor chunk_states;  // the fused CUDA path's chunk-start states with params.save_chunk_states, else undefined
  // Not saved otherwise: the states S_t, T x K x V per head. The recurrent backward recomputes them
  // from checkpoints every kSimpleGlaCheckpoint tokens, the chunked ones from the chunk-start states.
};

struct SimpleGlaGrads {
  Tensor dq, dk;  // (B, T, Gq, K), summed over the heads of each group
  Tensor dv;      // (B, T, H, V)
  Tensor dg;      // (B, T, H)
  Tensor dS0;     // (B, H, K, V)
};

// needed: bit 0 q, 1 k, 2 v, 3 g, 4 S0. dfinal (B, H, K, V) may be undefined (the state is unused).
SimpleGlaOutputs simple_gla_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                    const Tensor& S0, const SimpleGlaParams& p, SimpleGlaSaved* saved);
SimpleGlaGrads simple_gla_backward(const SimpleGlaSaved& s, const Tensor& dout, const Tensor& dfinal, GradMask needed);

struct SimpleGlaVars {
  Var o, final_state;
};
SimpleGlaVars simple_gla(const Var& q, const Var& k, const Var& v, const Var& g, const Var& S0,
                         const SimpleGlaParams& p);

// The CPU forms: recurrent (simple_gla_cpu.cpp) and chunked (simple_gla_chunked_cpu.cpp). The CUDA
// path is simple_gla_*_kernels (simple_gla_kernels.cpp): the chunk-toolkit sequence, always chunks of
// 64 tokens whatever chunk_size says (0 included), f32 or bf16 q, k, v with f32 g and states; on CPU
// tensors it runs the toolkit's loop twins (tests only).
constexpr int64_t kSimpleGlaCheckpoint = 64;
SimpleGlaOutputs simple_gla_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                        const Tensor& S0, double scale);
SimpleGlaGrads simple_gla_backward_cpu(const SimpleGlaSaved& s, const Tensor& dout, const Tensor& dfinal,
                                       GradMask needed);
SimpleGlaOutputs simple_gla_chunked_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                                const Tensor& S0, double scale, int64_t chunk);
SimpleGlaGrads simple_gla_chunked_backward_cpu(const SimpleGlaSaved& s, const Tensor& dout, const Tensor& dfinal,
                                               GradMask needed);
SimpleGlaOutputs simple_gla_forward_kernels(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                            const Tensor& S0, double scale);
SimpleGlaGrads simple_gla_backward_kernels(const SimpleGlaSaved& s, const Tensor& dout, const Tensor& dfinal,
                                           GradMask needed);
// The fused bf16 CUDA path (simple_gla_cuda.cu): tensor-core kernels per chunk of 64 tokens, taken
// when supported says so (bf16 on CUDA, K and V <= 128 and multiples of 8, and the shared-memory
// tiles fit); otherwise the toolkit sequence above runs. HYBRID_SIMPLE_GLA_FUSED=0 in the environment
// turns the fused path off. keep_states, when not null, gets the chunk-start states the backward reads
// from SimpleGlaSaved::chunk_states.
bool simple_gla_fused_supported(const Tensor& q, const Tensor& k, const Tensor& v, int64_t T, int64_t K, int64_t V,
                                int64_t heads_per_group);
SimpleGlaOutputs simple_gla_forward_fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                          const Tensor& S0, double scale, Tensor* keep_states);
SimpleGlaGrads simple_gla_backward_fused(const SimpleGlaSaved& s, const Tensor& dout, const Tensor& dfinal,
                                         GradMask needed);
// The one-token forward on CUDA (simple_gla_decode.cu): one kernel on the state, the decode step.
SimpleGlaOutputs simple_gla_decode_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                        const Tensor& S0, double scale);

}  // namespace hyb
