// Random inputs and states for the nha decode step tests (CPU identities, CUDA parity): f64 CPU
// tensors of one regime, the ring sized as the mixer sizes it (nha_decode.h).
//   DecodeCase c = random_decode_case({.T = 13, .window = 4, .shift = 4}, 1);
//   NhaDecodeState st = c.state(/*ring_rows=*/c.ring_rows(13));
#pragma once
#include <algorithm>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "layers/nha/nha_decode.h"

namespace hyb {

struct DecodeShape {
  int64_t B = 2, T = 13, Hq = 4, Hkv = 2, D = 8, Dv = 6, M = 5;
  int64_t window = 4, shift = 4;  // nha_decode.h: -1 unlimited / never
  bool rope = true, bias = false, states = true;
  bool slot_silu = false;  // slot_feature_map swish: the slots read silu(q), silu(k)
};

struct DecodeCase {
  DecodeShape shape;
  Tensor q, k, v, s, g, HK0, HV0, bias;  // (B, T, ...) inputs; s, g, HK0, HV0 undefined when M = 0
  RopeTable table;                       // with rope: a CPU table over T positions (the CPU step reads inv_freq)

  // Ring slots the step needs for positions 0..positions-1 (every one of them for an unlimited window).
  int64_t ring_rows(int64_t positions) const {
    const DecodeShape& d = shape;
    if (d.window < 0) return positions;
    return std::max(d.window, d.M > 0 && d.shift > 0 ? d.shift : int64_t(0));
  }
  // A fresh state: the initial memories (zeros without `states`) and an empty ring of `rows` slots.
  NhaDecodeState state(int64_t rows) const {
    const DecodeShape& d = shape;
    NhaDecodeState st;
    if (d.M > 0) {
      st.HK = HK0.defined() ? HK0.clone() : Tensor::zeros({d.B, d.Hkv, d.D, d.M}, DType::f64);
      st.HV = HV0.defined() ? HV0.clone() : Tensor::zeros({d.B, d.Hkv, d.M, d.Dv}, DType::f64);
    }
    if (rows > 0) {
      st.ring_k = Tensor::zeros({d.B, rows, d.Hkv, d.D}, DType::f64);
      st.ring_v = Tensor::zeros({d.B, rows, d.Hkv, d.Dv}, DType::f64);
    }
    if (d.M > 0 && d.shift > 0) {
      st.ring_s = Tensor::zeros({d.B, rows, d.Hkv, d.M}, DType::f64);
      st.ring_g = Tensor::zeros({d.B, rows, d.Hkv, d.M}, DType::f64);
    }
    return st;
  }
  NhaDecodeParams params(int64_t pos) const {
    NhaDecodeParams p;
    p.scale = 0.5;
    p.window = shape.window;
    p.shift = shape.shift;
    p.pos = pos;
    p.slot_silu = shape.slot_silu;
    return p;
  }
};

inline DecodeCase random_decode_case(const DecodeShape& d, uint64_t seed) {
  DecodeCase c;
  c.shape = d;
  c.q = random_tensor({d.B, d.T, d.Hq, d.D}, seed, DType::f64, 0.7);
  c.k = random_tensor({d.B, d.T, d.Hkv, d.D}, seed + 1, DType::f64, 0.7);
  c.v = random_tensor({d.B, d.T, d.Hkv, d.Dv}, seed + 2);
  if (d.M > 0) {
    c.s = Tensor::empty({d.B, d.T, d.Hkv, d.M}, DType::f64);
    fill_uniform(c.s, seed + 3, "test.decode.s", 0.0, 1.0);
    c.g = Tensor::empty({d.B, d.T, d.Hkv, d.M}, DType::f64);
    fill_uniform(c.g, seed + 4, "test.decode.g", -0.9, -0.01);
    if (d.states) {
      c.HK0 = random_tensor({d.B, d.Hkv, d.D, d.M}, seed + 5, DType::f64, 0.5);
      c.HV0 = random_tensor({d.B, d.Hkv, d.M, d.Dv}, seed + 6, DType::f64, 0.5);
    }
  }
  if (d.bias) c.bias = random_tensor({d.Hq, (d.window < 0 ? d.T : d.window) + 2}, seed + 7, DType::f64, 0.5);
  if (d.rope) c.table = rope_table(10000.0, d.D, d.T, std::nullopt, Device::cpu());
  return c;
}

}  // namespace hyb
