// CUDA path shared by the gsa and nha ops: a gated slot memory (gsa.md 2.1) read by one softmax
// that may also cover a causal window of recent tokens (nha.md 2). GSA is the case window = 0,
// shift = 0; NHA lets query t read the memory after token t - shift and adds the window logits.
//
// Algorithm (gsa.md 4 in a generic form). Both memories are "feature x slot" matrices with the same
// recurrence X_u = X_{u-1} .*c exp(g_u) + outer(x_u, s_u): X1 = Hk (x = k), X2 = Hv^T (x = v).
// Tokens are cut into chunks of kScanChunk = 64; g is cumulated in fp32 inside each chunk only
// (rule 4.1.1), and every exponent evaluated is b_i - b_j with j <= i, b_i, or bl - b_j (4.1.2).
//   forward: chunk-start states of X1 and X2 (per-chunk increments, then a scan over chunks); then
//            the rows: one block per (query head, tile of 64 queries) with the slot logits and the
//            window logits in one softmax (the window C keys at a time, online); o and lse (saved).
//            A tile's queries read the memory of one chunk: tiles start at chunk boundaries + shift.
//   backward: the rows rebuild the probabilities from lse and write the adjoints of the two memory
//            reads (dZ and P per slot), dq, and the window's dq; a key-major pass gives the window's
//            dk and dv; a reverse scan per memory gives the adjoint at every chunk end; one block per
//            chunk turns those into dk, dv, ds and the gate gradient (chunk-local reverse cumsum plus
//            the tail of 4.3).
// Intermediates are fp32; q, k, v, o and their gradients are f32 or bf16. With bf16 inputs the chunk
// kernels multiply on tensor cores (bf16 operands, split into hi + lo where fp32 accuracy matters).
//   SlotAttentionArgs a{...};  SlotAttentionOut y = slot_attention_forward_cuda(a, false);
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hyb {

struct SlotAttentionArgs {
  Tensor q, k, v;   // (B, T, Hq, D), (B, T, Hkv, D), (B, T, Hkv, Dv), f32 or bf16, contiguous, cuda
  Tensor s, g;      // (B, T, Hkv, M) f32, or undefined (M = 0: no memory)
  Tensor HK0, HV0;  // (B, Hkv, D, M), (B, Hkv, M, Dv) f32, or undefined (zeros)
  Tensor qr, kr;    // window-side q and k (RoPE applied or not), shapes of q and k; only with window > 0
  Tensor bias;      // (Hq, nb) in q's dtype, or undefined
  double scale = 1.0;
  int64_t window = 0;  // resolved: 0..T keys counting the current one
  int64_t shift = 0;   // resolved: 0..T; query t reads the memory after absorbing token t - shift
};

struct SlotAttentionOut {
  Tensor o;           // (B, T, Hq, Dv), q's dtype
  Tensor HK, HV;      // final memories (f32), undefined when M = 0
  Tensor lse;         // (B, T, Hq) f32: log of the softmax normaliser of every row
  Tensor long_ratio;  // (B, T, Hq) f32 share of the slots, when asked for
};
SlotAttentionOut slot_attention_forward_cuda(const SlotAttentionArgs& a, bool long_ratio);

struct SlotAttentionGrads {  // all f32; the caller converts to the inputs' dtypes
  Tensor dq, dk;        // the memory-side parts (zeros when M = 0)
  Tensor dqr, dkr;      // the window-side gradients of qr and kr (window > 0), to map back through RoPE
  Tensor dv;            // both parts
  Tensor ds, dg;        // M > 0
  Tensor dHK0, dHV0;    // when the initial memories were given
  Tensor dbias;         // when a bias was given
};
// lse and o: the forward's (o is read only with a window: delta = <dO, O> of every row). dHK, dHV:
// gradients of the final memories, or undefined.
SlotAttentionGrads slot_attention_backward_cuda(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& o,
                                                const Tensor& dout, const Tensor& dHK, const Tensor& dHV);

}  // namespace hyb
