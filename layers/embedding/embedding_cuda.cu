// CUDA embedding lookup and its deterministic backward. Backward sorts (id, position) pairs with a
// stable radix sort, so the positions of each id are in increasing order; one block per distinct
// id then sums its rows in that order into fp32 and writes dW once. No atomics: bit-reproducible.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "layers/embedding/embedding_op.h"

namespace hyb {
namespace {

template <typename T>
__global__ void embedding_forward_kernel(const int32_t* __restrict__ ids, const T* __restrict__ w, T* __restrict__ out,
                                         int64_t N, int64_t C, int64_t V, int* __restrict__ bad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int32_t id = ids[n];
    if (id < 0 || id >= V) {
      *bad = 1;
      out[i] = from_f32<T>(0.f);
      continue;
    }
    out[i] = w[int64_t(id) * C + c];
  }
}

// Block b handles the b-th distinct id: rows positions[start .. start + count) of dout.
template <typename T>
__global__ void embedding_backward_kernel(const int32_t* __restrict__ unique_ids, const int32_t* __restrict__ counts,
                                          const int32_t* __restrict__ offsets, const int32_t* __restrict__ positions,
                                          const T* __restrict__ dout, T* __restrict__ dw, const int* __restrict__ n_unique,
                                          int64_t C) {
  if (int(blockIdx.x) >= *n_unique) return;
  const int32_t id = unique_ids[blockIdx.x], start = offsets[blockIdx.x], count = counts[blockIdx.x];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0;
    for (int32_t k = 0; k < count; ++k) s += to_f32(dout[int64_t(positions[start + k]) * C + c]);
    dw[int64_t(id) * C + c] = from_f32<T>(s);
  }
}

__global__ void iota_kernel(int32_t* p, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) p[i] = int32_t(i);
}

__global__ void exclusive_offsets_kernel(const int32_t* counts, int32_t* offsets, const int* n_unique) {
  // One thread: n_unique is at most the vocabulary of one batch, a few thousand adds.
  int32_t acc = 0;
  for (int i = 0; i < *n_unique; ++i) {
    offsets[i] = acc;
    acc += counts[i];
  }
}

}  // namespace

Tensor embedding_forward_cuda(const Tensor& ids0, const Tensor& w0) {
  Tensor ids = ids0.contiguous(), w = w0.contiguous();
  const int64_t N = ids.numel(), C = w.size(1), V = w.size(0);
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  Tensor out = Tensor::empty(out_shape, w.dtype(), w.device());
  Tensor bad = Tensor::zeros({1}, DType::i32, w.device());
  const int dev = w.device().index;
  const int grid = grid_blocks(N * C, 256, dev);
  visit_cuda_float("embedding_forward_cuda", w.dtype(), [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_kernel<T><<<grid, 256, 0, current_stream(dev)>>>(ids.data<int32_t>(), w.data<T>(), out.data<T>(), N,
                                                                       C, V, bad.data<int32_t>());
    HYB_CUDA_LAUNCH_CHECK("embedding_forward_kernel", grid, 256, 0);
  });
  HYB_CHECK(bad.item() == 0, "embedding: a token id is outside the vocabulary [0, ", V, ")");
  return out;
}

Tensor embedding_backward_cuda(const Tensor& ids0, const Tensor& dout0, int64_t vocab) {
  Tensor ids = ids0.contiguous(), dout = dout0.contiguous();
  const int64_t N = ids.numel(), C = dout.size(-1);
  HYB_CHECK(N < INT32_MAX, "embedding_backward_cuda: ", N, " tokens exceed the int32 positions");
  const Device d = dout.device();
  const int dev = d.index;
  cudaStream_t stream = current_stream(dev);
  Tensor positions = Tensor::empty({N}, DType::i32, d), sorted_ids = Tensor::empty({N}, DType::i32, d);
  Tensor sorted_pos = Tensor::empty({N}, DType::i32, d);
  Tensor unique_ids = Tensor::empty({N}, DType::i32, d), counts = Tensor::empty({N}, DType::i32, d);
  Tensor offsets = Tensor::empty({N}, DType::i32, d), n_unique = Tensor::empty({1}, DType::i32, d);
  iota_kernel<<<grid_blocks(N, 256, dev), 256, 0, stream>>>(positions.data<int32_t>(), N);
  HYB_CUDA_LAUNCH_CHECK("iota_kernel", grid_blocks(N, 256, dev), 256, 0);

  int end_bit = 1;
  while ((int64_t(1) << end_bit) < vocab) ++end_bit;
  size_t sort_bytes = 0, rle_bytes = 0;
  HYB_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, ids.data<int32_t>(), sorted_ids.data<int32_t>(),
                                                 positions.data<int32_t>(), sorted_pos.data<int32_t>(), int(N), 0,
                                                 end_bit, stream));
  HYB_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, sorted_ids.data<int32_t>(),
                                                    unique_ids.data<int32_t>(), counts.data<int32_t>(),
                                                    n_unique.data<int32_t>(), int(N), stream));
  Tensor scratch = Tensor::empty({int64_t(std::max(sort_bytes, rle_bytes))}, DType::u16, d);
  HYB_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch.raw_data(), sort_bytes, ids.data<int32_t>(),
                                                 sorted_ids.data<int32_t>(), positions.data<int32_t>(),
                                                 sorted_pos.data<int32_t>(), int(N), 0, end_bit, stream));
  HYB_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(scratch.raw_data(), rle_bytes, sorted_ids.data<int32_t>(),
                                                    unique_ids.data<int32_t>(), counts.data<int32_t>(),
                                                    n_unique.data<int32_t>(), int(N), stream));
  exclusive_offsets_kernel<<<1, 1, 0, stream>>>(counts.data<int32_t>(), offsets.data<int32_t>(), n_unique.data<int32_t>());
  HYB_CUDA_LAUNCH_CHECK("exclusive_offsets_kernel", 1, 1, 0);

  Tensor dw = Tensor::zeros({vocab, C}, dout.dtype(), d);
  const int threads = int(std::min<int64_t>(256, (C + 31) / 32 * 32));
  visit_cuda_float("embedding_backward_cuda", dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // N blocks at most; blocks past the number of distinct ids return at once.
    embedding_backward_kernel<T><<<int(N), threads, 0, stream>>>(unique_ids.data<int32_t>(), counts.data<int32_t>(),
                                                                 offsets.data<int32_t>(), sorted_pos.data<int32_t>(),
                                                                 dout.data<T>(), dw.data<T>(), n_unique.data<int32_t>(), C);
    HYB_CUDA_LAUNCH_CHECK("embedding_backward_kernel", N, threads, 0);
  });
  return dw;
}

}  // namespace hyb
