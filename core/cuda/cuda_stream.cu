// The runtime's streams, one per (device, role), created lazily under a lock.
#include "core/cuda/cuda_stream.h"

#include <mutex>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/error.h"

namespace hyb {
namespace {

constexpr int kStreamSlots = 2 + kScanStreams;  // per device: compute, comm, the scan streams
int slot_of(StreamRole role, int index) { return role == StreamRole::scan ? 2 + index : int(role); }

struct StreamTable {
  std::mutex mutex;
  std::vector<cudaStream_t> streams;  // [device * kStreamSlots + slot_of(role, index)], null until first use
};

StreamTable& stream_table() {
  static StreamTable* table = new StreamTable;  // leaked on purpose: see the header
  return *table;
}

}  // namespace

cudaStream_t cuda_stream(int device, StreamRole role, int index) {
  check_cuda_device(device, "cuda_stream");
  HYB_CHECK(index >= 0 && index < (role == StreamRole::scan ? kScanStreams : 1), "cuda_stream: no stream ", index,
            " of that role");
  StreamTable& t = stream_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.streams.empty()) t.streams.assign(size_t(cuda_device_count()) * kStreamSlots, nullptr);
  cudaStream_t& s = t.streams[size_t(device) * kStreamSlots + size_t(slot_of(role, index))];
  if (!s) {
    CudaDeviceGuard guard(device);
    int least = 0, greatest = 0;
    if (role == StreamRole::scan) HYB_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    HYB_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  }
  return s;
}

void cuda_synchronize(int device) {
  for (int r = 0; r < 2; ++r) HYB_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(device, StreamRole(r))));
  for (int i = 0; i < kScanStreams; ++i)
    HYB_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(device, StreamRole::scan, i)));
}

CudaEvent::CudaEvent(bool timing) {
  HYB_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    if (event_) cudaEventDestroy(event_);
    event_ = o.event_;
    o.event_ = nullptr;
  }
  return *this;
}

void CudaEvent::record(cudaStream_t stream) { HYB_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void CudaEvent::block(cudaStream_t stream) const { HYB_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }

bool CudaEvent::query() const {
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  HYB_CUDA_CHECK(err);
  return true;
}

void CudaEvent::synchronize() const { HYB_CUDA_CHECK(cudaEventSynchronize(event_)); }

float CudaEvent::elapsed_ms(const CudaEvent& end) const {
  float ms = 0;
  HYB_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace hyb
