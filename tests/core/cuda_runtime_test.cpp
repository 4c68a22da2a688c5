// The CUDA runtime: error messages, device properties, copies and conversions, the caching allocator,
// and core's tensor math on the device against the CPU. Tagged [gpu]; the test main skips them when no
// device is visible. Only the first test runs without a GPU: it checks how a missing device is refused.
#include <catch2/catch.hpp>

#if HYBRID_CUDA
#include <chrono>
#include <cmath>
#include <thread>

#include "autograd/gradcheck.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "core/tensor.h"
#include "core/tensor_math.h"

using namespace hyb;

namespace {

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64, DType::u16};

// Random values every dtype can hold exactly enough to convert without overflow: |N(0, 300)|, so
// integers and u16 are in range and floats carry fractions that conversions must truncate or round.
Tensor random_values(const Shape& shape, uint64_t seed, DType dtype) {
  std::vector<double> v = random_tensor(shape, seed, DType::f64, 300.0).to_double_vector();
  for (double& x : v) x = std::fabs(x) + 0.25;
  return Tensor::from_vector(v, shape).to(dtype);
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i])) return false;  // NaN never matches
  return true;
}

}  // namespace

TEST_CASE("a cuda device index past the visible count is refused with the count", "[core][cuda]") {
  const int n = cuda_device_count();
  REQUIRE(n >= 0);
  REQUIRE_THROWS_WITH(Tensor::empty({4}, DType::f32, Device::cuda(n)),
                      Catch::Contains(str_cat("cuda:", n, " requested but")) && Catch::Contains("visible"));
}

TEST_CASE("device properties are read off the device", "[core][cuda][gpu]") {
  const CudaDeviceProps& p = cuda_device_props(0);
  INFO(p.name << " sm_" << p.major << p.minor << ", " << p.sm_count << " SMs, L2 " << format_bytes(p.l2_bytes));
  REQUIRE(p.sm_count > 0);
  REQUIRE(p.l2_bytes > 0);
  REQUIRE(p.smem_per_block_optin >= p.smem_per_block);
  REQUIRE(p.smem_per_sm >= p.smem_per_block_optin);
  REQUIRE(p.total_memory > (size_t(1) << 30));
  REQUIRE(&cuda_device_props(0) == &p);
}

TEST_CASE("HYB_CUDA_CHECK names the call, the file and line, and the CUDA error", "[core][cuda][gpu]") {
  REQUIRE_THROWS_WITH([] { HYB_CUDA_CHECK(cudaSetDevice(9999)); }(),
                      Catch::Contains("cudaSetDevice(9999)") && Catch::Contains("cuda_runtime_test.cpp:") &&
                          Catch::Contains("cudaErrorInvalidDevice"));
  REQUIRE(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("a launch check names the kernel, grid, block and shared memory", "[core][cuda][gpu]") {
  REQUIRE(cudaSetDevice(9999) != cudaSuccess);  // leaves an error for the launch check to find
  REQUIRE_THROWS_WITH(HYB_CUDA_LAUNCH_CHECK("gsa_backward_intra_chunk_kernel", dim3(16, 8, 2), 128, 96 * 1024),
                      Catch::Contains("gsa_backward_intra_chunk_kernel: launch failed") &&
                          Catch::Contains("(grid 16x8x2, block 128, smem 96.00 KiB)") &&
                          Catch::Contains("cuda_runtime_test.cpp:"));
  REQUIRE_NOTHROW(HYB_CUDA_LAUNCH_CHECK("after_the_error_was_read", 1, 32, 0));
}

TEST_CASE("every dtype round-trips host to device to host and device to device unchanged", "[core][cuda][gpu]") {
  for (DType dt : kAllDTypes) {
    for (int64_t n : {1, 7, 1000, 100003}) {
      DYNAMIC_SECTION(dtype_name(dt) << " n" << n) {
        Tensor h = random_values({n}, 11 + uint64_t(n), dt);
        Tensor d = h.to(Device::cuda(0));
        REQUIRE(d.is_cuda());
        REQUIRE(same_values(d.to(Device::cpu()), h));
        Tensor d2 = d.clone();
        REQUIRE_FALSE(d2.same_storage(d));
        REQUIRE(same_values(d2.to(Device::cpu()), h));
      }
    }
  }
}

TEST_CASE("strided views copy between host and device like the cpu copy", "[core][cuda][gpu]") {
  for (DType dt : kAllDTypes) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      Tensor h = random_values({5, 6, 7}, 21, dt);
      Tensor d = h.to(Device::cuda(0));
      // Device views back to the host: transposed, sliced with a step, narrowed at an odd offset, permuted.
      REQUIRE(same_values(d.transpose(0, 2).to(Device::cpu()), h.transpose(0, 2).contiguous()));
      REQUIRE(same_values(d.slice(1, 1, 6, 2).to(Device::cpu()), h.slice(1, 1, 6, 2).contiguous()));
      REQUIRE(same_values(d.narrow(2, 3, 3).to(Device::cpu()), h.narrow(2, 3, 3).contiguous()));
      REQUIRE(same_values(d.permute({1, 2, 0}).contiguous().to(Device::cpu()), h.permute({1, 2, 0}).contiguous()));
      // Host data into a strided device view leaves the rest of the device tensor alone.
      Tensor dst = Tensor::zeros({5, 6, 7}, dt, Device::cuda(0));
      Tensor src = random_values({5, 3, 7}, 22, dt);
      dst.slice(1, 0, 6, 2).copy_(src.transpose(0, 2).contiguous().transpose(0, 2));
      Tensor expect = Tensor::zeros({5, 6, 7}, dt);
      expect.slice(1, 0, 6, 2).copy_(src);
      REQUIRE(same_values(dst.to(Device::cpu()), expect));
      // Device to device, strided on both sides.
      Tensor dd = Tensor::zeros({7, 6, 5}, dt, Device::cuda(0));
      dd.transpose(0, 2).copy_(d);
      REQUIRE(same_values(dd.to(Device::cpu()), h.transpose(0, 2).contiguous()));
      // A host strided destination.
      Tensor host_dst = Tensor::zeros({7, 6, 5}, dt);
      host_dst.transpose(0, 2).copy_(d);
      REQUIRE(same_values(host_dst, h.transpose(0, 2).contiguous()));
    }
  }
}

TEST_CASE("dtype conversion on the device matches the cpu conversion for every pair", "[core][cuda][gpu]") {
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes) {
      DYNAMIC_SECTION(dtype_name(from) << " to " << dtype_name(to)) {
        Tensor h = random_values({3, 1001}, 31, from);
        Tensor d = h.to(Device::cuda(0));
        REQUIRE(same_values(d.to(to).to(Device::cpu()), h.to(to)));                    // dense
        REQUIRE(same_values(d.transpose(0, 1).to(to).to(Device::cpu()), h.transpose(0, 1).to(to).contiguous()));
        Tensor cross = Tensor::empty({3, 1001}, to);                                    // d2h with conversion
        cross.copy_(d);
        REQUIRE(same_values(cross, h.to(to)));
        Tensor up = Tensor::empty({3, 1001}, to, Device::cuda(0));                    // h2d with conversion
        up.copy_(h);
        REQUIRE(same_values(up.to(Device::cpu()), h.to(to)));
      }
    }
}

TEST_CASE("fill writes every element of a strided view and nothing else", "[core][cuda][gpu]") {
  for (DType dt : kAllDTypes) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      Tensor h = random_values({9, 130}, 41, dt);
      Tensor d = h.to(Device::cuda(0));
      d.slice(1, 1, 130, 3).fill_(7.5);
      h.slice(1, 1, 130, 3).fill_(7.5);
      REQUIRE(same_values(d.to(Device::cpu()), h));
      d.narrow(0, 1, 7).fill_(-0.0);  // contiguous rows at an offset; -0.0 is not all-zero bytes
      h.narrow(0, 1, 7).fill_(-0.0);
      REQUIRE(same_values(d.to(Device::cpu()), h));
      d.zero_();
      REQUIRE(sum_squares(d) == 0.0);
    }
  }
}

namespace {

// dst + alpha * src in fp64, each operation rounded once, then rounded to dst's dtype, written out here
// unfused: the CPU loop in tensor_math.cpp is the same expression, but a host compiler may contract it
// into a fused multiply-add (GCC 13 with -march=native does), which the kernel deliberately does not.
// (d = 0.2890625, s = 0.78125, alpha = -0.37 gives 0 unfused and 3.5e-18 fused.)
Tensor add_reference(const Tensor& dst, const Tensor& src, double alpha) {
  std::vector<double> d = dst.to_double_vector(), s = src.to_double_vector();
  for (size_t i = 0; i < d.size(); ++i) {
    volatile double product = alpha * s[i];
    d[i] = d[i] + product;
  }
  return Tensor::from_vector(d, dst.shape()).to(dst.dtype());
}

// Index and values of the first difference, for the failure message.
std::string first_difference(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
  for (size_t i = 0; i < g.size(); ++i)
    if (!(g[i] == w[i])) return str_cat("element ", i, ": device ", g[i], ", reference ", w[i]);
  return "none";
}

}  // namespace

TEST_CASE("add_ and scale_ on the device round once per fp64 operation, as the cpu loop is written", "[core][cuda][gpu]") {
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (DType st : {DType::f32, DType::bf16, DType::f64})
      for (int64_t n : {1, 7, 1000, 100003}) {
        DYNAMIC_SECTION(dtype_name(dt) << " += " << dtype_name(st) << " n" << n) {
          Tensor hd = random_tensor({n}, 51, DType::f64).to(dt), hs = random_tensor({n}, 52, DType::f64).to(st);
          Tensor dd = hd.to(Device::cuda(0)), ds = hs.to(Device::cuda(0));
          add_(dd, ds, -0.37);
          Tensor want = add_reference(hd, hs, -0.37);
          INFO(first_difference(dd, want));
          REQUIRE(same_values(dd.to(Device::cpu()), want));
          // A single product: the cpu scale_ is the reference.
          Tensor hd2 = dd.to(Device::cpu());
          scale_(dd, 1.7);
          scale_(hd2, 1.7);
          REQUIRE(same_values(dd.to(Device::cpu()), hd2));
          // At an offset of one element the 16-byte path is off: the scalar path must agree too.
          if (n > 1) {
            Tensor before = dd.to(Device::cpu());
            add_(dd.narrow(0, 1, n - 1), ds.narrow(0, 0, n - 1), 0.625);
            Tensor want2 = before.clone();
            want2.narrow(0, 1, n - 1).copy_(add_reference(before.narrow(0, 1, n - 1), hs.narrow(0, 0, n - 1), 0.625));
            INFO(first_difference(dd, want2));
            REQUIRE(same_values(dd.to(Device::cpu()), want2));
            Tensor hd3 = dd.to(Device::cpu());
            scale_(dd.narrow(0, 1, n - 1), -3.1);
            scale_(hd3.narrow(0, 1, n - 1), -3.1);
            REQUIRE(same_values(dd.to(Device::cpu()), hd3));
          }
        }
      }
}

TEST_CASE("sum_squares on the device agrees with the fp64 cpu sum", "[core][cuda][gpu]") {
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (int64_t n : {1, 7, 1000, 100003, 3000017}) {
      DYNAMIC_SECTION(dtype_name(dt) << " n" << n) {
        Tensor h = random_tensor({n}, 61, DType::f64).to(dt);
        Tensor d = h.to(Device::cuda(0));
        const double ref = sum_squares(h);
        REQUIRE(std::fabs(sum_squares(d) - ref) <= 1e-5 * ref);
        const double ref_off = sum_squares(h.narrow(0, 1, n - 1));
        REQUIRE(std::fabs(sum_squares(d.narrow(0, 1, n - 1)) - ref_off) <= 1e-5 * ref_off + 1e-300);
      }
    }
  Tensor bad = random_tensor({1000}, 62, DType::f32);
  bad.data<float>()[517] = std::nanf("");
  REQUIRE_FALSE(all_finite(bad.to(Device::cuda(0))));
}

TEST_CASE("sum_squares_each over a list of mixed dtypes, alignments and sizes gives each tensor's own sum",
          "[core][cuda][gpu]") {
  // More tensors than one launch's table, runs broken by dtype and alignment, empty tensors between.
  std::vector<Tensor> host, dev;
  for (int i = 0; i < 150; ++i) {
    const DType dt = i % 37 == 5 ? DType::bf16 : i % 41 == 7 ? DType::f64 : DType::f32;
    const int64_t n = i % 29 == 3 ? 0 : 1 + (int64_t(i) * 7919) % 70001;
    Tensor h = random_tensor({n + 1}, 700 + uint64_t(i), DType::f64).to(dt);
    const bool odd = i % 11 == 4;  // a view one element in: not 16-byte aligned
    host.push_back(h.narrow(0, odd ? 1 : 0, n));
    dev.push_back(h.to(Device::cuda(0)).narrow(0, odd ? 1 : 0, n));
  }
  const std::vector<double> got = sum_squares_each(dev);
  REQUIRE(got.size() == dev.size());
  for (size_t i = 0; i < dev.size(); ++i) {
    INFO("tensor " << i << " " << dev[i].str());
    REQUIRE(got[i] == sum_squares(dev[i]));  // the same blocks as the tensor alone: the same bits
    const double ref = sum_squares(host[i]);
    REQUIRE(std::fabs(got[i] - ref) <= 1e-5 * ref);
  }
}

TEST_CASE("the caching allocator reuses blocks: cudaMalloc count stays flat across a loop", "[core][cuda][gpu]") {
  const size_t sizes[] = {1, 511, 513, 4096, (1 << 20) + 1, 3 << 20, 17 << 20};
  auto run = [&] {
    std::vector<Tensor> live;
    for (size_t s : sizes) live.push_back(Tensor::empty({int64_t(s)}, DType::u16, Device::cuda(0)));
    live.erase(live.begin() + 2);  // free out of order so neighbours must merge
    live.push_back(Tensor::empty({300}, DType::f32, Device::cuda(0)));
  };
  run();
  const CudaAllocatorStats before = cuda_allocator_stats(0);
  for (int i = 0; i < 100; ++i) run();
  const CudaAllocatorStats after = cuda_allocator_stats(0);
  REQUIRE(after.device_mallocs == before.device_mallocs);
  REQUIRE(after.allocations == before.allocations + 100 * 8);
  REQUIRE(after.allocated_bytes == before.allocated_bytes);
}

TEST_CASE("allocator counters track allocated, reserved and peak bytes, and empty_cache releases", "[core][cuda][gpu]") {
  cuda_empty_cache(0);  // from here on a large request needs a fresh segment: the counts below are exact
  const CudaAllocatorStats s0 = cuda_allocator_stats(0);
  Tensor a = Tensor::empty({1}, DType::f32, Device::cuda(0));  // rounds up to one 512-byte block
  const CudaAllocatorStats s1 = cuda_allocator_stats(0);
  REQUIRE(s1.allocated_bytes == s0.allocated_bytes + 512);
  REQUIRE(s1.reserved_bytes >= s1.allocated_bytes);
  constexpr uint64_t kBig = 6 << 20;  // a whole number of 2 MiB segments: no tail to split off
  cuda_reset_peak_stats(0);
  {
    Tensor big = Tensor::empty({int64_t(kBig / 4)}, DType::f32, Device::cuda(0));
    const CudaAllocatorStats s2 = cuda_allocator_stats(0);
    REQUIRE(s2.allocated_bytes == s1.allocated_bytes + kBig);
    REQUIRE(s2.reserved_bytes == s1.reserved_bytes + kBig);
    REQUIRE(s2.device_mallocs == s1.device_mallocs + 1);
    REQUIRE(s2.peak_allocated_bytes == s2.allocated_bytes);
  }
  const CudaAllocatorStats s3 = cuda_allocator_stats(0);
  REQUIRE(s3.allocated_bytes == s1.allocated_bytes);
  REQUIRE(s3.reserved_bytes == s1.reserved_bytes + kBig);  // freed into the cache, not to the driver
  REQUIRE(s3.peak_allocated_bytes == s1.allocated_bytes + kBig);
  cuda_empty_cache(0);
  const CudaAllocatorStats s4 = cuda_allocator_stats(0);
  REQUIRE(s4.reserved_bytes == s1.reserved_bytes);
  REQUIRE(s4.device_frees == s3.device_frees + 1);
  REQUIRE(s4.allocated_bytes == s3.allocated_bytes);
  Tensor again = Tensor::empty({int64_t(kBig / 4)}, DType::f32, Device::cuda(0));
  REQUIRE(cuda_allocator_stats(0).device_mallocs == s4.device_mallocs + 1);
}

TEST_CASE("an absurd allocation fails saying how much was asked, reserved and in use", "[core][cuda][gpu]") {
  Tensor keep = Tensor::empty({1000}, DType::f32, Device::cuda(0));
  const uint64_t retries = cuda_allocator_stats(0).oom_retries;
  REQUIRE_THROWS_WITH(cuda_caching_allocator(0)->allocate(size_t(1) << 50),
                      Catch::Contains("CUDA out of memory on cuda:0") && Catch::Contains("asked for 1.00 PiB") &&
                          Catch::Contains("reserved") && Catch::Contains("in use by tensors") &&
                          Catch::Contains("retried once"));
  REQUIRE(cuda_allocator_stats(0).oom_retries == retries + 1);
  // The failure leaves no error behind: the device keeps working.
  Tensor after = random_tensor({1000}, 71, DType::f32).to(Device::cuda(0));
  REQUIRE(std::isfinite(sum_squares(after)));
  REQUIRE(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("a block used on another stream is not reused until that stream's work is done", "[core][cuda][gpu]") {
  cuda_empty_cache(0);  // no cached block this large is left, so each request below is one whole segment
  constexpr int64_t kFloats = (38 << 20) / 4;
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  // A host callback that sleeps keeps the side stream busy for a known time without any kernel.
  auto sleep_300ms = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  REQUIRE(cudaLaunchHostFunc(side, sleep_300ms, nullptr) == cudaSuccess);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({kFloats}, DType::f32, Device::cuda(0));
    first = t.raw_data();
    cuda_record_stream(0, first, side);
  }
  Tensor second = Tensor::empty({kFloats}, DType::f32, Device::cuda(0));
  REQUIRE(second.raw_data() != first);
  REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
  Tensor third = Tensor::empty({kFloats}, DType::f32, Device::cuda(0));
  REQUIRE(third.raw_data() == first);
  REQUIRE(cudaStreamDestroy(side) == cudaSuccess);
}

TEST_CASE("the compute stream is one per device and events order work across streams", "[core][cuda][gpu]") {
  REQUIRE(current_stream(0) == current_stream(0));
  REQUIRE(current_stream(0) != nullptr);
  Tensor x = random_tensor({1 << 20}, 81, DType::f32).to(Device::cuda(0));
  CudaEvent start(true), stop(true);
  start.record(current_stream(0));
  scale_(x, 2.0);
  stop.record(current_stream(0));
  stop.synchronize();
  REQUIRE(stop.query());
  REQUIRE(start.elapsed_ms(stop) >= 0.0f);
}

#endif  // HYBRID_CUDA
