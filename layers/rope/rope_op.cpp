// The RoPE frequency table (fp64 angles, f32 storage), checks, the CPU/CUDA branch and the tape
// record.
#include "layers/rope/rope_op.h"

#include <cmath>
#include <numbers>

namespace hyb {

std::vector<double> rope_inv_freq(double theta, int64_t rope_dim, const std::optional<RopeScaling>& scaling) {
  HYB_CHECK(theta > 0, "rope: theta must be > 0, got ", theta);
  HYB_CHECK(rope_dim > 0 && rope_dim % 2 == 0, "rope: rope_dim must be even and > 0, got ", rope_dim);
  std::vector<double> inv(size_t(rope_dim / 2));
  for (int64_t i = 0; i < rope_dim / 2; ++i) inv[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(rope_dim));
  if (!scaling) return inv;
  const RopeScaling& s = *scaling;
  HYB_CHECK(s.factor > 0 && s.original_max_position > 0 && s.low_freq_factor > 0 &&
                s.high_freq_factor > s.low_freq_factor,
            "rope_scaling: expected factor > 0, original_max_position > 0 and high_freq_factor > low_freq_factor > 0,"
            " got factor ", s.factor, ", original_max_position ", s.original_max_position, ", low_freq_factor ",
            s.low_freq_factor, ", high_freq_factor ", s.high_freq_factor);
  const double L0 = s.original_max_position;
  for (double& f : inv) {
    const double wavelength = 2 * std::numbers::pi / f;
    if (wavelength < L0 / s.high_freq_factor) continue;
    if (wavelength > L0 / s.low_freq_factor) {
      f /= s.factor;
    } else {
      const double t = (L0 / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - t) * f / s.factor + t * f;
    }
  }
  return inv;
}

RopeTable rope_table(double theta, int64_t rope_dim, int64_t max_position, const std::optional<RopeScaling>& scaling,
                     Device device) {
  HYB_CHECK(max_position >= 0, "rope: max_position must be >= 0, got ", max_position);
  RopeTable t;
  t.rope_dim = rope_dim;
  t.inv_freq = rope_inv_freq(theta, rope_dim, scaling);
  const int64_t half = rope_dim / 2;
  Tensor c = Tensor::empty({max_position, half}, DType::f32), s = Tensor::empty({max_position, half}, DType::f32);
  float* cp = c.data<float>();
  float* sp = s.data<float>();
  for (int64_t p = 0; p < max_position; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(p) * t.inv_freq[size_t(i)];  // fp64: p * inv_f loses digits in fp32 for large p
      cp[p * half + i] = float(std::cos(a));
      sp[p * half + i] = float(std::sin(a));
    }
  t.cos = c.to(device);
  t.sin = s.to(device);
  return t;
}

namespace {

Tensor rope_rotate(const char* op, const Tensor& x, const RopeTable& table, int64_t offset, int direction) {
  HYB_CHECK(x.dim() == 4, op, ": x must be (B, T, H, D), got ", shape_str(x.shape()));
  HYB_CHECK(table.rope_dim > 0 && table.rope_dim <= x.size(3), op, ": rope_dim ", table.rope_dim,
            " must be in 1..D, but x is ", shape_str(x.shape()), " with D = ", x.size(3));
  HYB_CHECK(offset >= 0, op, ": the position offset must be >= 0, got ", offset);
#if HYBRID_CUDA
  if (x.is_cuda()) return rope_rotate_cuda(x, table, offset, direction);
#endif
  return rope_rotate_cpu(x, table, offset, direction);
}

}  // namespace

Tensor rope_forward(const Tensor& x, const RopeTable& table, int64_t offset) {
  return rope_rotate("rope_forward", x, table, offset, +1);
}

Tensor rope_backward(const Tensor& dy, const RopeTable& table, int64_t offset) {
  return rope_rotate("rope_backward", dy, table, offset, -1);
}

Var rope(const Var& x, const RopeTable& table, int64_t offset) {
  Tensor y = rope_forward(x.data(), table, offset);
  return record_op1("rope", {x}, y, [table, offset](const Tensor& dy, GradMask) {
    return Grads{rope_backward(dy, table, offset)};
  });
}

}  // namespace hyb
