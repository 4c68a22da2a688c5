// CPU reference of the embedding lookup and its scatter-add backward (embedding_op.h).
#include <cstring>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/embedding/embedding_op.h"

namespace hyb {

Tensor embedding_forward_cpu(const Tensor& ids0, const Tensor& w0) {
  Tensor ids = ids0.contiguous(), w = w0.contiguous();
  const int64_t V = w.size(0), C = w.size(1), N = ids.numel();
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  Tensor out = Tensor::empty(out_shape, w.dtype());
  const int32_t* ip = ids.data<int32_t>();
  for (int64_t n = 0; n < N; ++n)
    HYB_CHECK(ip[n] >= 0 && ip[n] < V, "embedding: token id ", ip[n], " at position ", n, " is outside the vocabulary [0, ", V, ")");
  const size_t row_bytes = size_t(C) * dtype_size(w.dtype());
  const char* wp = static_cast<const char*>(w.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  parallel_for(N, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) std::memcpy(op + n * row_bytes, wp + ip[n] * row_bytes, row_bytes);
  });
  return out;
}

Tensor embedding_backward_cpu(const Tensor& ids0, const Tensor& dout0, int64_t vocab) {
  Tensor ids = ids0.contiguous(), dout = dout0.contiguous();
  const int64_t C = dout.size(-1), N = ids.numel();
  Tensor dw = Tensor::zeros({vocab, C}, dout.dtype());
  const int32_t* ip = ids.data<int32_t>();
  visit_float("embedding_backward", dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    T* d = dw.data<T>();
    // Threads split the columns, each walks the rows in order: no races, a fixed summation order.
    parallel_for(C, 16, [&](int64_t c0, int64_t c1) {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = c0; c < c1; ++c) d[ip[n] * C + c] += g[n * C + c];
    });
  });
  return dw;
}

}  // namespace hyb
