#include "train/distributed/nccl_communicator.h"

#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "train/distributed/rendezvous.h"

namespace hyb {

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  int device = 0;
  double timeout_s = 600;
  bool aborted = false;
  CudaEvent compute_done, comm_done;
  cudaStream_t comm_stream() const { return cuda_stream(device, StreamRole::comm); }
  cudaStream_t compute_stream() const { return cuda_stream(device, StreamRole::compute); }
};

#define HYB_NCCL_CHECK(call, what)                                                                   \
  do {                                                                                               \
    ncclResult_t hyb_nccl_r_ = (call);                                                               \
    HYB_CHECK(hyb_nccl_r_ == ncclSuccess, "NCCL ", what, " (rank ", rank_, " of ", size_, "): ",     \
              ncclGetErrorString(hyb_nccl_r_), " at ", __FILE__, ":", __LINE__,                     \
              hyb_nccl_r_ == ncclSystemError || hyb_nccl_r_ == ncclRemoteError                       \
                  ? std::string("; ") + ncclGetLastError(s_->comm)                                    \
                  : std::string());                                                                  \
  } while (0)

static ncclDataType_t nccl_type(const Tensor& t, const char* op) {
  HYB_CHECK(t.is_cuda() && t.is_contiguous(), op, ": NCCL takes contiguous CUDA tensors, got ", t.device().str());
  if (t.dtype() == DType::f32) return ncclFloat32;
  if (t.dtype() == DType::f64) return ncclFloat64;
  throw Error(str_cat(op, ": NCCL collectives here take f32 or f64, got ", dtype_name(t.dtype())));
}

static ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::mean: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

NcclCommunicator::NcclCommunicator(const DistEnv& env, int device, double timeout_s)
    : rank_(env.rank), size_(env.world_size) {
  check_cuda_device(device, "NcclCommunicator");
  HYB_CUDA_CHECK(cudaSetDevice(device));
  // After cudaSetDevice: an event belongs to the device current when it is created, and recording
  // one of cuda:0 on cuda:1's stream fails (invalid resource handle) on every rank but local rank 0.
  s_ = std::make_unique<State>();
  s_->device = device;
  s_->timeout_s = timeout_s;
  ncclUniqueId id{};
  if (rank_ == 0) HYB_NCCL_CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
  const std::string shared = rendezvous_share(env, std::string(id.internal, sizeof(id.internal)), rendezvous_timeout_s());
  HYB_CHECK(shared.size() == sizeof(id.internal), "rendezvous (rank ", rank_, "): got ", shared.size(),
            " bytes for the NCCL id, expected ", sizeof(id.internal));
  std::copy(shared.begin(), shared.end(), id.internal);
  HYB_NCCL_CHECK(ncclCommInitRank(&s_->comm, size_, id, rank_), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (!s_->comm) return;
  // A communicator whose peer died cannot be destroyed collectively; aborting frees it alone.
  if (s_->aborted) return;
  if (cudaStreamSynchronize(s_->comm_stream()) == cudaSuccess) ncclCommDestroy(s_->comm);
  else ncclCommAbort(s_->comm);
}

void NcclCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  HYB_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t, "all_reduce"), nccl_op(op),
                               s_->comm, s_->comm_stream()),
                 "all_reduce");
}

void NcclCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  HYB_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: input has ", in.numel(), " elements, output ",
            out.numel(), " on ", size_, " ranks");
  HYB_NCCL_CHECK(ncclReduceScatter(in.raw_data(), out.raw_data(), size_t(out.numel()), nccl_type(in, "reduce_scatter"),
                                   nccl_op(op), s_->comm, s_->comm_stream()),
                 "reduce_scatter");
}

void NcclCommunicator::all_gather(const Tensor& in, Tensor& out) {
  HYB_CHECK(out.numel() == in.numel() * size_, "all_gather: input has ", in.numel(), " elements, output ",
            out.numel(), " on ", size_, " ranks");
  HYB_NCCL_CHECK(ncclAllGather(in.raw_data(), out.raw_data(), size_t(in.numel()), nccl_type(in, "all_gather"),
                               s_->comm, s_->comm_stream()),
                 "all_gather");
}

void NcclCommunicator::broadcast(Tensor& t, int root) {
  HYB_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t, "broadcast"), root,
                               s_->comm, s_->comm_stream()),
                 "broadcast");
}

void NcclCommunicator::copy(Tensor& dst, const Tensor& src) {
  HYB_CHECK(dst.is_cuda() && src.device() == dst.device() && dst.dtype() == src.dtype() && dst.numel() == src.numel() &&
                dst.is_contiguous() && src.is_contiguous(),
            "NcclCommunicator::copy: ", src.str(), " into ", dst.str(), ": contiguous tensors of one dtype and size on ",
            "one device");
  HYB_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), size_t(src.numel()) * dtype_size(src.dtype()),
                                 cudaMemcpyDeviceToDevice, s_->comm_stream()));
}

void NcclCommunicator::after_compute() {
  s_->compute_done.record(s_->compute_stream());
  s_->compute_done.block(s_->comm_stream());
}

void NcclCommunicator::before_compute() {
  s_->comm_done.record(s_->comm_stream());
  const auto t0 = std::chrono::steady_clock::now();
  while (!s_->comm_done.query()) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(s_->comm, &async);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (async != ncclSuccess || waited > s_->timeout_s) {
      const std::string why = async != ncclSuccess
                                  ? str_cat("NCCL reported ", ncclGetErrorString(async), ": ", ncclGetLastError(s_->comm))
                                  : str_cat("no progress for ", s_->timeout_s, " s (HYBRID_COMM_TIMEOUT)");
      ncclCommAbort(s_->comm);
      s_->aborted = true;
      throw Error(str_cat("data parallel: rank ", rank_, " of ", size_, ": collectives did not complete: ", why,
                          "; another rank probably died or stopped (see its log)"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  s_->comm_done.block(s_->compute_stream());
}

}  // namespace hyb
