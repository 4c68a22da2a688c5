// Host emulation of the CUDA subset the fused chunk kernels use, for checking them without a GPU:
// every thread of a block is a ucontext fiber on one OS thread; __syncthreads, __syncwarp, the
// shuffles (and, in the generated flash_attention_device.cuh, ldmatrix and mma.sync) are collective
// operations on barriers and a per-warp exchange buffer. Fresh shared memory holds 0x7F bytes (about
// 3.4e38 as bf16 and as fp32), so a read before the write that should precede it shows in the result.
// EMU_SCHED picks the schedule: rr (every fiber in turn at each collective), fwd or rev (one warp runs
// until all its fibers wait at a block barrier, warps in increasing or decreasing order). The skewed
// schedules are the ones that expose a missing __syncthreads between warps.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __align__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

using std::max;
using std::min;

namespace emu {

constexpr size_t kSmemLimit = 232448;  // the opt-in shared memory of a Hopper block
constexpr size_t kFiberStack = 256 * 1024;

struct Block {
  dim3 bidx, bdim, gdim;
  int nthreads = 0;
  std::vector<unsigned char> smem;
  std::vector<ucontext_t> ctx;
  std::vector<char> done, at_barrier;
  std::vector<unsigned> wait_gen;  // the block-barrier generation a fiber waits to see pass
  ucontext_t sched;
  int cur = 0;
  int bar_count = 0;
  unsigned bar_gen = 0;
  bool and_false[3] = {};  // __syncthreads_and, by barrier generation % 3
  int wbar_count[32] = {};
  unsigned wbar_gen[32] = {};
  uint32_t xch[32][32][8];  // [warp][lane][word]: what a lane offers a warp collective
};

inline Block*& block() {
  static Block* b = nullptr;
  return b;
}
inline unsigned tid() { return unsigned(block()->cur); }
inline unsigned lane() { return tid() % 32; }
inline uint32_t* xch(unsigned l) { return block()->xch[tid() / 32][l]; }
inline unsigned char* smem_base() { return block()->smem.data(); }
inline void yield() { swapcontext(&block()->ctx[size_t(block()->cur)], &block()->sched); }

inline void syncthreads() {
  Block* b = block();
  const unsigned gen = b->bar_gen;
  if (++b->bar_count == b->nthreads) {
    b->bar_count = 0;
    ++b->bar_gen;
    return;
  }
  b->at_barrier[size_t(b->cur)] = 1;
  b->wait_gen[size_t(b->cur)] = gen;
  while (b->bar_gen == gen) yield();
  b->at_barrier[size_t(b->cur)] = 0;
}

// A slot a call: every thread resets its call's slot before it reaches another barrier, so a later call, two
// generations on at the earliest, never finds it set.
inline bool syncthreads_and(bool pred) {
  Block* b = block();
  bool& any_false = b->and_false[b->bar_gen % 3];
  if (!pred) any_false = true;
  syncthreads();
  const bool all = !any_false;
  syncthreads();
  any_false = false;
  return all;
}

inline void syncwarp() {
  Block* b = block();
  const unsigned w = tid() / 32, gen = b->wbar_gen[w];
  if (++b->wbar_count[w] == 32) {
    b->wbar_count[w] = 0;
    ++b->wbar_gen[w];
    return;
  }
  while (b->wbar_gen[w] == gen) yield();
}

template <typename T>
T shfl_from(T v, int src) {
  static_assert(sizeof(T) == 4, "32-bit shuffles");
  std::memcpy(xch(lane()), &v, 4);
  syncwarp();
  T r;
  std::memcpy(&r, xch(unsigned(src)), 4);
  syncwarp();
  return r;
}

// Runs the fibers of one block to completion under the EMU_SCHED schedule.
inline void schedule(Block& b) {
  static const std::string sched = getenv("EMU_SCHED") ? getenv("EMU_SCHED") : "rr";
  auto run = [&](int t) {
    b.cur = t;
    swapcontext(&b.sched, &b.ctx[size_t(t)]);
  };
  auto blocked = [&](int t) {
    return b.done[size_t(t)] || (b.at_barrier[size_t(t)] && b.bar_gen == b.wait_gen[size_t(t)]);
  };
  const int nw = b.nthreads / 32;
  for (;;) {
    if (sched == "rr") {
      for (int t = 0; t < b.nthreads; ++t)
        if (!b.done[size_t(t)]) run(t);
    } else {
      for (int wi = 0; wi < nw; ++wi) {
        const int w = sched == "fwd" ? wi : nw - 1 - wi;
        const unsigned gen0 = b.bar_gen;
        bool moved = true;
        while (moved && b.bar_gen == gen0) {
          moved = false;
          for (int t = w * 32; t < w * 32 + 32; ++t)
            if (!blocked(t)) {
              run(t);
              moved = true;
            }
        }
      }
    }
    if (std::all_of(b.done.begin(), b.done.end(), [](char d) { return d != 0; })) return;
  }
}

// kernel<<<grid, threads, smem>>>(args...), block after block.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 threads, size_t smem, cudaStream_t, A... args) {
  if (smem > kSmemLimit) {
    std::fprintf(stderr, "emu: %zu bytes of shared memory requested, the limit is %zu\n", smem, kSmemLimit);
    std::abort();
  }
  static std::vector<std::unique_ptr<char[]>> stacks;
  static std::tuple<A...>* tuple_args;
  static void (*entry)(P...);
  std::tuple<A...> packed(args...);
  tuple_args = &packed;
  entry = kernel;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Block b;
        b.bidx = dim3(bx, by, bz), b.bdim = threads, b.gdim = grid;
        b.nthreads = int(threads.x * threads.y * threads.z);
        if (b.nthreads % 32 != 0) std::abort();
        b.smem.assign(smem, 0x7F);
        b.ctx.resize(size_t(b.nthreads));
        b.done.assign(size_t(b.nthreads), 0);
        b.at_barrier.assign(size_t(b.nthreads), 0);
        b.wait_gen.assign(size_t(b.nthreads), 0);
        block() = &b;
        for (int t = 0; t < b.nthreads; ++t) {
          while (int(stacks.size()) <= t) stacks.emplace_back(new char[kFiberStack]);
          ucontext_t& c = b.ctx[size_t(t)];
          getcontext(&c);
          c.uc_stack.ss_sp = stacks[size_t(t)].get();
          c.uc_stack.ss_size = kFiberStack;
          c.uc_link = &b.sched;
          makecontext(&c, reinterpret_cast<void (*)()>(+[]() {
            std::apply([](auto... x) { entry(x...); }, *tuple_args);
            block()->done[size_t(block()->cur)] = 1;
          }),
                      0);
        }
        schedule(b);
        block() = nullptr;
      }
}

}  // namespace emu

struct EmuIdx {
  unsigned x, y, z;
};
#define threadIdx (EmuIdx{emu::tid() % emu::block()->bdim.x, emu::tid() / emu::block()->bdim.x, 0u})
#define blockIdx (emu::block()->bidx)
#define blockDim (emu::block()->bdim)
#define gridDim (emu::block()->gdim)

inline void __syncthreads() { emu::syncthreads(); }
inline int __syncthreads_and(int pred) { return emu::syncthreads_and(pred != 0); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
template <typename T>
T __shfl_sync(unsigned, T v, int src) {
  return emu::shfl_from(v, src & 31);
}
template <typename T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  return emu::shfl_from(v, int(emu::lane()) ^ mask);
}
template <typename T>
T __shfl_up_sync(unsigned, T v, unsigned delta) {
  const int src = int(emu::lane()) - int(delta);
  return emu::shfl_from(v, src < 0 ? int(emu::lane()) : src);
}
inline float __expf(float x) { return std::exp(x); }
// Blocks may run on several OS threads (OpenMP), so the add is a real atomic.
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
template <class T>
cudaError_t cudaFuncSetAttribute(T*, cudaFuncAttribute, int bytes) {
  if (size_t(bytes) > emu::kSmemLimit) std::abort();
  return cudaSuccess;
}
