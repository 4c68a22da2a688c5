// Inverted dropout with a counter-based mask, so CPU and GPU drop the same elements:
//   keep_i = word(offset + i) >= ceil(p 2^32)    (integer comparison, i = row-major element index)
//   y_i    = keep_i x_i / (1 - p),   dx_i = keep_i dy_i / (1 - p)
// word(k) is the k-th 32-bit word of the Philox stream make_key(seed, name): lane k % 4 of block k / 4,
// the numbering RngStream and fill_uniform use. The mask is recomputed in backward, never stored.
// offset lets one named stream serve many calls (a caller passes e.g. step * numel).
//   Var h = dropout(x, 0.1, cfg.seed, "model.layers.3.dropout", step * x.numel(), training);
#pragma once
#include <string_view>

#include "autograd/tape.h"
#include "core/rng.h"

namespace hyb {

struct DropoutParams {
  PhiloxKey key;       // make_key(seed, stream name)
  uint64_t offset;     // stream word of element 0
  uint64_t threshold;  // ceil(p 2^32): keep iff word >= threshold
  double scale;        // 1 / (1 - p)
};

// Throws unless 0 <= p < 1.
DropoutParams dropout_params(double p, uint64_t seed, std::string_view name, uint64_t offset);

// Which of the four elements whose words make Philox block `block` (stream words 4 block .. 4 block + 3)
// survive: bit j for word 4 block + j. Host and device share this one definition; the CPU and CUDA
// loops call it a block at a time (one Philox evaluation per four elements).
HYB_HD unsigned dropout_keep_block(const DropoutParams& d, uint64_t block) {
  uint32_t c[4] = {uint32_t(block), uint32_t(block >> 32), 0u, 0u};
  philox4x32_10(c, d.key);
  unsigned bits = 0;
  for (int j = 0; j < 4; ++j) bits |= unsigned(uint64_t(c[j]) >= d.threshold) << j;
  return bits;
}

// Whether element i survives.
HYB_HD bool dropout_keep(const DropoutParams& d, uint64_t i) {
  const uint64_t k = d.offset + i;
  return (dropout_keep_block(d, k >> 2) >> (k & 3)) & 1u;
}

Tensor dropout_forward(const Tensor& x, const DropoutParams& d);
Tensor dropout_backward(const DropoutParams& d, const Tensor& dy);
// Identity (x itself, no node) when !train or p == 0.
Var dropout(const Var& x, double p, uint64_t seed, std::string_view name, uint64_t offset, bool train);

// CPU reference (dropout_cpu.cpp): y = keep x scale, in x's row-major order. The CUDA twin is in
// dropout_cuda.h; backward is the same map applied to dy.
Tensor dropout_forward_cpu(const Tensor& x, const DropoutParams& d);

}  // namespace hyb
