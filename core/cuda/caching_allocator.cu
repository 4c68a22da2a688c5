// A block-pool caching allocator for device memory, one per device (see caching_allocator.h).
// Blocks are carved from cudaMalloc segments and kept in two best-fit pools ordered by (size, address):
// small (<= 1 MiB, from 2 MiB segments, so many small tensors share one segment and never fragment the
// large pool) and large (segments rounded to 2 MiB). A large block is split only when the rest is over
// 1 MiB; smaller tails stay with the block, so the large pool never fills with slivers. Neighbours in a
// segment are linked and merge on free; a segment is returned to the driver only by empty_cache or when
// cudaMalloc fails, which then retries once.
#include "core/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "core/error.h"

namespace hyb {
namespace {

constexpr size_t kRound = 512;           // every block size is a multiple: 16-byte vectors never straddle
constexpr size_t kSmallLimit = 1 << 20;  // requests up to this size use the small pool
constexpr size_t kSegment = 2 << 20;     // small-pool segment size, large-pool rounding

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

enum class BlockState { free, allocated, pending };  // pending: freed, waiting for other streams' events

struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  bool small = false;
  BlockState state = BlockState::free;
  Block* prev = nullptr;  // neighbours inside the same cudaMalloc segment
  Block* next = nullptr;
  int pending_events = 0;
  std::vector<cudaStream_t> stream_uses;  // streams other than compute that used this allocation
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};
using FreeSet = std::set<Block*, BlockLess>;

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(device) {}

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    process_events();
    HYB_CHECK(bytes <= (size_t(1) << 60), "CUDA allocation on cuda:", device_, ": asked for ", bytes,
              " bytes, more than any device holds");
    const size_t size = round_up(bytes, kRound);
    const bool small = size <= kSmallLimit;
    FreeSet& pool = small ? small_ : large_;
    Block key;
    key.size = size;
    auto it = pool.lower_bound(&key);
    Block* b = nullptr;
    if (it != pool.end()) {
      b = *it;
      pool.erase(it);
    } else {
      const size_t segment = small ? kSegment : round_up(size, kSegment);
      char* p = device_malloc(segment, bytes);
      b = new Block;
      b->ptr = p;
      b->size = segment;
      b->small = small;
    }
    split(b, size);
    b->state = BlockState::allocated;
    live_[b->ptr] = b;
    stats_.allocated_bytes += b->size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.allocations;
    return b->ptr;
  }

  // Called from Storage's destructor, so it reports instead of throwing.
  void deallocate(void* p, size_t) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) {
      std::fprintf(stderr, "hybrid: internal error: cuda:%d caching allocator asked to free %p, which it did not "
                   "allocate (please report)\n", device_, p);
      return;
    }
    Block* b = it->second;
    live_.erase(it);
    stats_.allocated_bytes -= b->size;
    if (b->stream_uses.empty()) return free_block(b);
    b->state = BlockState::pending;
    try {
      CudaDeviceGuard guard(device_);
      for (cudaStream_t s : b->stream_uses) {
        CudaEvent e;
        e.record(s);
        events_.emplace_back(std::move(e), b);
        ++b->pending_events;
      }
      b->stream_uses.clear();
    } catch (const std::exception& e) {
      // Without an event the only safe reuse is after the whole device is idle.
      std::fprintf(stderr, "hybrid: cuda:%d caching allocator: %s; synchronising the device instead\n", device_,
                   e.what());
      cudaDeviceSynchronize();
      cudaGetLastError();
      b->stream_uses.clear();
      if (b->pending_events == 0) free_block(b);
    }
  }

  CudaAllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    synchronize_events();
    release_cached();
  }

  void record_stream(void* p, cudaStream_t s) {
    const cudaStream_t compute = current_stream(device_);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    HYB_CHECK(it != live_.end(), "cuda_record_stream: ", p, " is not the start of a live allocation on cuda:", device_);
    if (s == compute) return;
    auto& uses = it->second->stream_uses;
    if (std::find(uses.begin(), uses.end(), s) == uses.end()) uses.push_back(s);
  }

 private:
  char* device_malloc(size_t segment, size_t requested) {
    CudaDeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, segment);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ++stats_.oom_retries;
      synchronize_events();
      release_cached();
      err = cudaMalloc(&p, segment);
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
      throw Error(str_cat("CUDA out of memory on cuda:", device_, ": asked for ", format_bytes(requested), " (",
                          requested, " bytes); hybrid has ", format_bytes(stats_.reserved_bytes), " reserved, ",
                          format_bytes(stats_.allocated_bytes), " of it in use by tensors; the device has ",
                          format_bytes(free_bytes), " free of ", format_bytes(total_bytes),
                          " (cached blocks were released and the allocation retried once)"));
    }
    if (err != cudaSuccess) cuda_check_failed(err, "cudaMalloc(&p, segment)", __FILE__, __LINE__);
    ++stats_.device_mallocs;
    stats_.reserved_bytes += segment;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    return static_cast<char*>(p);
  }

  FreeSet& pool_of(const Block* b) { return b->small ? small_ : large_; }

  // Cuts b down to `size` when the rest is worth a block of its own; the rest goes to the pool.
  void split(Block* b, size_t size) {
    const size_t rest = b->size - size;
    if (b->small ? rest < kRound : rest <= kSmallLimit) return;
    Block* r = new Block;
    r->ptr = b->ptr + size;
    r->size = rest;
    r->small = b->small;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool_of(r).insert(r);
  }

  // Returns b to its pool, merged with free neighbours (no two neighbours are ever both free).
  void free_block(Block* b) {
    FreeSet& pool = pool_of(b);
    b->state = BlockState::free;
    if (b->prev && b->prev->state == BlockState::free) {
      Block* p = b->prev;
      pool.erase(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next) b->next->prev = p;
      delete b;
      b = p;
    }
    if (b->next && b->next->state == BlockState::free) {
      Block* n = b->next;
      pool.erase(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next) n->next->prev = b;
      delete n;
    }
    pool.insert(b);
  }

  void event_done(Block* b) {
    if (--b->pending_events == 0) free_block(b);
  }

  void process_events() {
    size_t kept = 0;
    for (size_t i = 0; i < events_.size(); ++i) {
      if (events_[i].first.query()) event_done(events_[i].second);
      else events_[kept++] = std::move(events_[i]);
    }
    events_.resize(kept);
  }

  void synchronize_events() {
    for (auto& [event, block] : events_) {
      event.synchronize();
      event_done(block);
    }
    events_.clear();
  }

  // Frees every segment that is one free block. Queued kernels may still read blocks that were freed
  // on the compute stream (stream-ordered reuse), so the device must be idle first.
  void release_cached() {
    CudaDeviceGuard guard(device_);
    HYB_CUDA_CHECK(cudaDeviceSynchronize());
    for (FreeSet* pool : {&small_, &large_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next) {
          ++it;
          continue;
        }
        HYB_CUDA_CHECK(cudaFree(b->ptr));
        ++stats_.device_frees;
        stats_.reserved_bytes -= b->size;
        it = pool->erase(it);
        delete b;
      }
    }
  }

  const int device_;
  std::mutex mutex_;
  FreeSet small_, large_;
  std::unordered_map<void*, Block*> live_;           // allocated blocks by address
  std::vector<std::pair<CudaEvent, Block*>> events_;  // one per (pending block, stream that used it)
  CudaAllocatorStats stats_;
};

CudaCachingAllocator& allocator(int device) {
  check_cuda_device(device, "device memory");
  // Leaked on purpose: tensors in static objects are freed after static destructors would have run.
  static std::vector<CudaCachingAllocator*>* all = [] {
    auto* v = new std::vector<CudaCachingAllocator*>;
    for (int d = 0; d < cuda_device_count(); ++d) v->push_back(new CudaCachingAllocator(d));
    return v;
  }();
  return *(*all)[size_t(device)];
}

}  // namespace

Allocator* cuda_caching_allocator(int device) { return &allocator(device); }
CudaAllocatorStats cuda_allocator_stats(int device) { return allocator(device).stats(); }
void cuda_reset_peak_stats(int device) { allocator(device).reset_peak(); }
void cuda_empty_cache(int device) { allocator(device).empty_cache(); }
void cuda_record_stream(int device, void* ptr, cudaStream_t stream) { allocator(device).record_stream(ptr, stream); }

}  // namespace hyb
