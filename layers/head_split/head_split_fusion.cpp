#include "layers/head_split/head_split_fusion.h"

#include "autograd/ops/binary.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/unary.h"
#include "layers/linear/linear_op.h"
#include "layers/norm/rmsnorm_op.h"

namespace hyb {

// The rmsnorm op with a constant unit gain is the parameter-free per-head norm of 4.4 (Choice 4),
// and its backward is 4.6's do = r (dn - n mean(dn n)): the gain's gradient is never asked for.
Var group_rms_norm(const Var& x, int64_t head_dim, double eps) {
  const Shape shape = x.shape();
  HYB_CHECK(!shape.empty() && head_dim > 0 && shape.back() % head_dim == 0, "group_rms_norm: x is ", shape_str(shape),
            " but the groups are ", head_dim, " wide; the last dimension must be a multiple of it");
  Shape heads = shape;
  heads.back() = shape.back() / head_dim;
  heads.push_back(head_dim);
  const Var unit(Tensor::full({head_dim}, 1.0, x.dtype(), x.device()));
  return reshape(rmsnorm(reshape(x, heads), unit, eps), shape);
}

Var fuse_halves(const Var& o_T, const Var& o_M, const FusionWeights& w, const FusionConfig& cfg) {
  Var a = o_T, m = o_M;
  if (cfg.norm == FusionNorm::group) {
    a = group_rms_norm(o_T, cfg.attn_head_dim, cfg.group_norm_eps);
    m = group_rms_norm(o_M, cfg.ssm_head_dim, cfg.group_norm_eps);
  }
  if (cfg.scalar == FusionScalar::scale) {
    a = mul(a, w.attn_scale);
    m = mul(m, w.ssm_scale);
  } else if (cfg.scalar == FusionScalar::gate) {
    const Var g = sigmoid(w.gate_logit);
    a = mul(a, g);
    m = mul(m, add_scalar(neg(g), 1.0));
  }
  if (cfg.out_proj == 2) {
    const Var y_T = linear(a, w.attn_o_proj), y_M = linear(m, w.ssm_out_proj);
    return cfg.op == FusionOp::diff ? sub(y_T, y_M) : add(y_T, y_M);
  }
  const Var f = cfg.op == FusionOp::conc ? concat({a, m}, -1) : cfg.op == FusionOp::diff ? sub(a, m) : add(a, m);
  return linear(f, w.o_proj);
}

}  // namespace hyb
