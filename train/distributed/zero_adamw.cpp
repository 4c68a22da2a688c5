#include "train/distributed/zero_adamw.h"

#include <cmath>

#include "core/tensor_math.h"
#include "optim/clip.h"

namespace hyb {

ZeroAdamW::ZeroAdamW(std::vector<OptimParam> params, GradSync& sync, AdamWHyper hyper)
    : params_(std::move(params)), sync_(sync), h_(hyper) {
  HYB_CHECK(sync.sharded(), "ZeroAdamW needs a GradSync in shard mode");
  const int64_t rank = sync.comm().rank();
  const Device device = params_[0].var.device();
  for (size_t b = 0; b < sync.buckets().size(); ++b) {
    const int64_t S = sync.shard_size(b), lo = rank * S, hi = lo + S;
    for (const BucketSlot& s : sync.buckets()[b].slots) {
      const int64_t a = std::max(lo, s.offset), e = std::min(hi, s.offset + s.numel);
      if (a < e) pieces_.push_back({s.param, b, a - s.offset, a - lo, e - a});
    }
    m_.push_back(Tensor::zeros({S}, DType::f32, device));
    v_.push_back(Tensor::zeros({S}, DType::f32, device));
  }
}

Tensor ZeroAdamW::grad_of(const Piece& p) const { return sync_.shard(p.bucket).narrow(0, p.shard_offset, p.numel); }

double ZeroAdamW::local_grad_sum_squares() const {
  std::vector<Tensor> grads;
  for (const Piece& p : pieces_) grads.push_back(grad_of(p));
  double ss = 0;
  for (double s : sum_squares_each(grads)) ss += s;
  return ss;
}

int64_t ZeroAdamW::local_first_nonfinite() const {
  int64_t first = -1;
  for (const Piece& p : pieces_)
    if ((first < 0 || int64_t(p.param) < first) && !all_finite(grad_of(p))) first = int64_t(p.param);
  return first;
}

void ZeroAdamW::scale_grads(double f) const {
  for (size_t b = 0; b < m_.size(); ++b) scale_(sync_.shard(b), f);
}

double ZeroAdamW::clip_grad_norm(double max_norm) const {
  const double norm =
      std::sqrt(sync_.comm().all_reduce_host(local_grad_sum_squares(), ReduceOp::sum, params_[0].var.device()));
  const double f = clip_factor(norm, max_norm);
  if (f < 1) scale_grads(f);
  return norm;
}

void ZeroAdamW::step(double factor) {
  ++t_;
  const AdamWStep s{h_.beta1, h_.beta2, h_.eps, 1 - std::pow(h_.beta1, double(t_)), 1 - std::pow(h_.beta2, double(t_))};
  std::vector<AdamWTarget> targets;
  for (const Piece& p : pieces_) {
    const OptimParam& op = params_[p.param];
    targets.push_back({op.var.data().view({-1}).narrow(0, p.param_offset, p.numel), grad_of(p),
                       m_[p.bucket].narrow(0, p.shard_offset, p.numel), v_[p.bucket].narrow(0, p.shard_offset, p.numel),
                       h_.lr * factor * op.lr_mult, op.weight_decay});
  }
  adamw_update(targets, s);
  // The updated slices go into the bucket buffers (their gradients are used up), are gathered,
  // and every rank copies the full buckets back into its parameters.
  for (const Piece& p : pieces_) grad_of(p).copy_(params_[p.param].var.data().view({-1}).narrow(0, p.param_offset, p.numel));
  Communicator& comm = sync_.comm();
  comm.after_compute();
  for (size_t b = 0; b < m_.size(); ++b) {
    Tensor buffer = sync_.buckets()[b].buffer;
    comm.all_gather(sync_.shard(b), buffer);
  }
  comm.before_compute();
  for (const GradBucket& b : sync_.buckets())
    for (const BucketSlot& s : b.slots) {
      const Tensor dst = params_[s.param].var.data();
      dst.view({-1}).copy_(b.buffer.narrow(0, s.offset, s.numel));
      dst.bump_version();
    }
}

AdamWState ZeroAdamW::gather_state() const {
  Communicator& comm = sync_.comm();
  AdamWState out;
  out.t = t_;
  std::vector<Tensor> full_m(params_.size()), full_v(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    full_m[i] = Tensor::zeros(params_[i].var.shape(), DType::f32, params_[i].var.device());
    full_v[i] = Tensor::zeros(params_[i].var.shape(), DType::f32, params_[i].var.device());
  }
  for (const auto& [state, full] : {std::pair{&m_, &full_m}, std::pair{&v_, &full_v}}) {
    for (size_t b = 0; b < state->size(); ++b) {
      const GradBucket& bucket = sync_.buckets()[b];
      Tensor gathered = Tensor::empty({bucket.padded}, DType::f32, bucket.buffer.device());
      comm.after_compute();
      comm.all_gather((*state)[b], gathered);
      comm.before_compute();
      for (const BucketSlot& s : bucket.slots) (*full)[s.param].view({-1}).copy_(gathered.narrow(0, s.offset, s.numel));
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    out.tensors.emplace_back(params_[i].name + ".exp_avg", full_m[i]);
    out.tensors.emplace_back(params_[i].name + ".exp_avg_sq", full_v[i]);
  }
  return out;
}

void ZeroAdamW::load_state(const AdamWState& state, const std::string& source) {
  for (const Piece& p : pieces_) {
    const OptimParam& op = params_[p.param];
    for (auto [suffix, dst] : {std::pair{".exp_avg", &m_}, std::pair{".exp_avg_sq", &v_}}) {
      const Tensor& src = find_state_tensor(state, op.name + suffix, source);
      HYB_CHECK(src.shape() == op.var.shape(), source, ": ", op.name, suffix, " is ", shape_str(src.shape()),
                ", model expects ", shape_str(op.var.shape()));
      (*dst)[p.bucket].narrow(0, p.shard_offset, p.numel).copy_(src.reshape({-1}).narrow(0, p.param_offset, p.numel));
    }
  }
  t_ = state.t;
}

}  // namespace hyb
