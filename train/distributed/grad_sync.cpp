#include "train/distributed/grad_sync.h"

#include "autograd/tape.h"

namespace hyb {

GradSync::GradSync(const std::vector<OptimParam>& params, Communicator& comm, double bucket_mb, bool shard)
    : params_(params), comm_(comm), shard_(shard) {
  HYB_CHECK(bucket_mb > 0, "data_parallel.bucket_mb must be > 0, got ", bucket_mb);
  HYB_CHECK(!params.empty(), "GradSync: no parameters");
  const int64_t cap = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024 / 4));
  const Device device = params[0].var.device();
  for (size_t i = params.size(); i-- > 0;) {
    const OptimParam& p = params[i];
    HYB_CHECK(p.var.dtype() == DType::f32 && p.var.device() == device, "GradSync: parameter ", p.name, " is ",
              dtype_name(p.var.dtype()), " on ", p.var.device().str(), "; data parallelism needs f32 parameters on one device");
    if (buckets_.empty() || buckets_.back().numel >= cap) buckets_.emplace_back();
    GradBucket& b = buckets_.back();
    b.slots.push_back({i, b.numel, p.var.numel()});
    b.numel += p.var.numel();
    bucket_of_[p.var.cell().get()] = buckets_.size() - 1;
  }
  const int64_t ranks = comm.size();
  for (GradBucket& b : buckets_) {
    b.padded = (b.numel + ranks - 1) / ranks * ranks;
    b.buffer = Tensor::zeros({b.padded}, DType::f32, device);
  }
}

GradSync::~GradSync() {
  if (armed_) set_grad_ready_hook(nullptr);
}

void GradSync::arm() {
  for (GradBucket& b : buckets_) {
    b.pending = int(b.slots.size());
    b.launched = false;
  }
  next_launch_ = 0;
  armed_ = true;
  set_grad_ready_hook([this](GradCell& cell) { on_ready(cell); });
}

void GradSync::on_ready(GradCell& cell) {
  auto it = bucket_of_.find(&cell);
  if (it == bucket_of_.end()) return;
  --buckets_[it->second].pending;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

void GradSync::launch(size_t bi) {
  GradBucket& b = buckets_[bi];
  // Contiguous gradients are copied in on the communication stream; the rest here: a parameter this
  // step did not use contributes zeros on every rank, and a strided gradient's packed copy would be a
  // temporary the compute stream could reuse while the communication stream still reads it.
  auto on_comm = [](const Tensor& g) { return g.defined() && g.is_contiguous(); };
  for (const BucketSlot& s : b.slots) {
    const Tensor& g = params_[s.param].var.grad();
    Tensor dst = b.buffer.narrow(0, s.offset, s.numel);
    if (!g.defined()) dst.zero_();
    else if (!on_comm(g)) dst.copy_(g.reshape({-1}));
  }
  comm_.after_compute();
  for (const BucketSlot& s : b.slots) {
    const Tensor& g = params_[s.param].var.grad();
    Tensor dst = b.buffer.narrow(0, s.offset, s.numel);
    if (on_comm(g) && g.raw_data() != dst.raw_data()) comm_.copy(dst, g.reshape({-1}));
  }
  if (shard_) {
    Tensor mine = shard(bi);
    comm_.reduce_scatter(b.buffer, mine, ReduceOp::mean);
  } else {
    comm_.all_reduce(b.buffer, ReduceOp::mean);
  }
  b.launched = true;
}

void GradSync::finish() {
  HYB_CHECK(armed_, "GradSync::finish without arm()");
  set_grad_ready_hook(nullptr);
  armed_ = false;
  for (; next_launch_ < buckets_.size(); ++next_launch_) launch(next_launch_);
  comm_.before_compute();
  // The gradients stay in the buckets: each parameter's gradient becomes its view there (a copy back
  // would sit between backward and the optimizer; with ZeRO-1 a second full-size copy of the
  // gradients would cancel the optimizer state it saves). zero_grad() clears it in place, so the
  // next backward adds into the bucket and nothing is copied in either.
  for (const GradBucket& b : buckets_)
    for (const BucketSlot& s : b.slots) {
      const Var& v = params_[s.param].var;
      if (v.grad().defined()) v.set_grad(b.buffer.narrow(0, s.offset, s.numel).view(v.shape()));
    }
}

}  // namespace hyb
