// Rotary position embedding, rotate-half convention (attention.md 5): for i < R/2 the pair
// (i, i + R/2) of each head vector turns by a(p, i) = p * inv_f[i], inv_f[i] = theta^(-2i/R);
// dims >= R pass through. Backward is the rotation by -a. Angles are computed in fp64; the table
// stores cos/sin as f32, which the f32 path reads. The f64 path computes cos/sin in fp64, and so do
// positions beyond the table (decoding).
//   RopeTable tab = rope_table(10000.0, /*rope_dim=*/64, /*max_position=*/4096, std::nullopt, Device::cpu());
//   Var qr = rope(q, tab);                 // q (B, T, H, D), token t at position t
//   Var kr = rope(k, tab, /*offset=*/17);  // token t at position 17 + t
#pragma once
#include <optional>
#include <vector>

#include "autograd/tape.h"

namespace hyb {

// Llama-3 frequency scaling (attention.md 5, `rope_scaling`): only for loading Llama-3.x weights.
struct RopeScaling {
  double factor = 8.0;            // s
  double low_freq_factor = 1.0;   // lf
  double high_freq_factor = 4.0;  // hf > lf
  double original_max_position = 8192;  // L0
};

struct RopeTable {
  int64_t rope_dim = 0;          // R: rotated dims, even
  std::vector<double> inv_freq;  // (R/2,) fp64, scaling applied
  Tensor cos, sin;               // (max_position, R/2) f32 on the device the op runs on
};

// inv_f[i] = theta^(-2i/R), then the Llama-3 rule per wavelength when scaling is given.
std::vector<double> rope_inv_freq(double theta, int64_t rope_dim, const std::optional<RopeScaling>& scaling);
RopeTable rope_table(double theta, int64_t rope_dim, int64_t max_position, const std::optional<RopeScaling>& scaling,
                     Device device);

// x (B, T, H, D) with D >= R, any strides; token t sits at position offset + t. Output contiguous.
Tensor rope_forward(const Tensor& x, const RopeTable& table, int64_t offset);
Tensor rope_backward(const Tensor& dy, const RopeTable& table, int64_t offset);
Var rope(const Var& x, const RopeTable& table, int64_t offset = 0);

// CPU reference (rope_cpu.cpp): direction +1 rotates by a, -1 by -a (the backward).
Tensor rope_rotate_cpu(const Tensor& x, const RopeTable& table, int64_t offset, int direction);
#if HYBRID_CUDA
Tensor rope_rotate_cuda(const Tensor& x, const RopeTable& table, int64_t offset, int direction);
#endif

}  // namespace hyb
