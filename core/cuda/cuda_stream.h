// Streams owned by the runtime: one set per device, made on first use and never destroyed (at exit
// the driver tears them down; destroying them from static destructors races that teardown). Every
// kernel, copy and GEMM runs on the device's compute stream, so work on one device is ordered and the
// caching allocator can hand a freed block to the next request at once. Other roles (the NCCL
// communication stream, the scan stream) join StreamRole and meet the compute stream through CudaEvent;
// work queued on them ends with the compute stream waiting for it, before the scratch it used is freed.
//   cudaStream_t s = current_stream(t.device().index);
//   CudaEvent done; done.record(s); done.block(cuda_stream(d, StreamRole::compute));
#pragma once
#include <cuda_runtime_api.h>

namespace hyb {

// comm: NCCL collectives of data parallelism. scan: the latency-bound recurrences that run beside
// per-chunk kernels on the compute stream and beside each other (gdn::run_scan, gdn::run_pieces),
// kScanStreams of them, at the device's highest stream priority so the block scheduler places their
// blocks first.
enum class StreamRole { compute, comm, scan };
constexpr int kScanStreams = 8;

// Non-blocking with respect to the legacy default stream, so stray default-stream work never serialises us.
// index: which of the role's streams (scan: 0 .. kScanStreams - 1; the others have one).
cudaStream_t cuda_stream(int device, StreamRole role, int index = 0);
inline cudaStream_t current_stream(int device) { return cuda_stream(device, StreamRole::compute); }

// Waits for everything queued on the device's runtime streams.
void cuda_synchronize(int device);

// A CUDA event that owns its handle. Without timing by default: recording then costs no clock read.
class CudaEvent {
 public:
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(CudaEvent&& o) noexcept : event_(o.event_) { o.event_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(cudaStream_t stream);
  void block(cudaStream_t stream) const;  // work queued on `stream` later waits for this event
  bool query() const;                     // true once the recorded work has finished
  void synchronize() const;
  float elapsed_ms(const CudaEvent& end) const;  // both made with timing = true
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace hyb
