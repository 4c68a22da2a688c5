// cuBLASLt behind gemm_cuda.h. cuBLASLt is column-major, and a row-major (r x c) matrix is the same
// memory as a column-major (c x r) one, so C = op(A) op(B) row-major is computed as C^T = op(B)^T op(A)^T:
// cuBLASLt's A is our b, its B is our a, and m = N, n = M. A transposed view of a contiguous matrix is
// passed as the opposite transpose flag instead of being copied. Matmul descriptors, layouts and the
// chosen algorithm are cached per shape (a training step repeats the same few shapes); each device has
// one handle and one 32 MiB workspace, used in order on its compute stream.
#include "kernels/gemm_cuda.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "core/tensor_math.h"

namespace hyb {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper

// One operand as it sits in memory: a row-major matrix per batch, `trans` meaning the memory holds the
// transpose of the logical matrix, `ld` its row length, `batch_stride` in elements.
struct Operand {
  Tensor t;
  bool trans;
  int64_t ld;
  int64_t batch_stride;
};

Operand prepare(const Tensor& x, bool trans) {
  const int64_t rows = x.size(-2), cols = x.size(-1);
  if (x.is_contiguous()) return {x, trans, cols, rows * cols};
  if (x.transpose(-1, -2).is_contiguous()) return {x, !trans, rows, rows * cols};
  return {x.contiguous(), trans, cols, rows * cols};
}

// Largest power of two up to 256 dividing the address and, with several batches, the batch stride.
uint32_t alignment(const void* p, int64_t batch_stride_bytes, int64_t batch) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256;
  if (batch > 1) bits |= uint64_t(batch_stride_bytes);
  return uint32_t(bits & (~bits + 1));
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  HYB_ASSERT(false, "no cuBLASLt type for ", dtype_name(t));
}

// Everything a cached plan depends on, in cuBLASLt's (column-major) terms.
struct PlanKey {
  int device;
  DType dtype;
  bool bias;  // the bias epilogue, its vector in the output's dtype
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
  uint32_t align_a, align_b, align_c;
  auto tie() const {
    return std::tie(device, dtype, bias, trans_a, trans_b, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b,
                    stride_c, align_a, align_b, align_c);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: cuBLASLt has no algorithm for this key (kept, so it is not asked again)
};

struct DeviceGemm {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

// Plans, handles and workspaces live for the whole process: destroying them at exit races the driver.
struct GemmCache {
  std::mutex mutex;
  std::map<PlanKey, Plan> plans;
  std::vector<DeviceGemm> devices;
};

GemmCache& gemm_cache() {
  static GemmCache* cache = new GemmCache;
  return *cache;
}

void lt_check(cublasStatus_t s, const char* call, const std::string& context) {
  HYB_CHECK(s == CUBLAS_STATUS_SUCCESS, context, ": ", call, " failed: ", cublasLtGetStatusString(s));
}

DeviceGemm& device_gemm(GemmCache& cache, int device) {
  if (cache.devices.empty()) cache.devices.resize(size_t(cuda_device_count()));
  DeviceGemm& g = cache.devices[size_t(device)];
  if (!g.handle) {
    CudaDeviceGuard guard(device);
    lt_check(cublasLtCreate(&g.handle), "cublasLtCreate", "matmul_into_cuda");
    g.workspace = cuda_caching_allocator(device)->allocate(kWorkspaceBytes);
  }
  return g;
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, T v, const std::string& context) {
  lt_check(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v), "cublasLtMatmulDescSetAttribute", context);
}

cublasLtMatrixLayout_t make_layout(DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                                   const std::string& context) {
  cublasLtMatrixLayout_t l = nullptr;
  lt_check(cublasLtMatrixLayoutCreate(&l, cuda_type(dtype), uint64_t(rows), uint64_t(cols), ld),
           "cublasLtMatrixLayoutCreate", context);
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
             "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", context);
    lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
             "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", context);
  }
  return l;
}

Plan make_plan(const PlanKey& k, cublasLtHandle_t handle, const std::string& context) {
  Plan p;
  const bool f64 = k.dtype == DType::f64;
  lt_check(cublasLtMatmulDescCreate(&p.desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                    f64 ? CUDA_R_64F : CUDA_R_32F),
           "cublasLtMatmulDescCreate", context);
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, context);
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, context);
  if (k.bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS, context);
  p.layout_a = make_layout(k.dtype, k.trans_a ? k.k : k.m, k.trans_a ? k.m : k.k, k.lda, k.batch, k.stride_a, context);
  p.layout_b = make_layout(k.dtype, k.trans_b ? k.n : k.k, k.trans_b ? k.k : k.n, k.ldb, k.batch, k.stride_b, context);
  p.layout_c = make_layout(k.dtype, k.m, k.n, k.ldc, k.batch, k.stride_c, context);

  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", context);
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto v) {
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof v), "cublasLtMatmulPreferenceSetAttribute",
             context);
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kWorkspaceBytes));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_a);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_b);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.align_c);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_c);
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.layout_a, p.layout_b, p.layout_c,
                                                          p.layout_c, pref, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_NOT_SUPPORTED) lt_check(s, "cublasLtMatmulAlgoGetHeuristic", context);
  p.found = s == CUBLAS_STATUS_SUCCESS && count > 0;
  if (p.found) p.algo = result.algo;
  return p;
}

std::string describe(const char* op, const Tensor& c, const Tensor& a, const Tensor& b, bool ta, bool tb,
                     int64_t batch, int64_t M, int64_t N, int64_t K, bool shared_b) {
  return str_cat(op, ": ", dtype_name(c.dtype()), " a ", shape_str(a.shape()), ta ? " (transposed)" : "", " b ",
                 shape_str(b.shape()), tb ? " (transposed)" : "", shared_b ? " (shared)" : "", " -> c ",
                 shape_str(c.shape()), " [M=", M, ", N=", N, ", K=", K, ", batch=", batch, "] on ", c.device().str());
}

void gemm(const char* op, const Tensor& c, const Tensor& a, const Tensor& b, const Tensor* bias, bool ta, bool tb,
          int64_t batch, int64_t M, int64_t N, int64_t K, bool shared_b, double alpha, double beta) {
  const std::string context = describe(op, c, a, b, ta, tb, batch, M, N, K, shared_b);
  HYB_CHECK(c.dtype() == DType::f32 || c.dtype() == DType::bf16 || c.dtype() == DType::f64, context,
            ": dtype must be f32, bf16 or f64");
  HYB_CHECK(a.dtype() == c.dtype() && b.dtype() == c.dtype(), context, ": a, b and c must share one dtype, got ",
            dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " and ", dtype_name(c.dtype()));
  HYB_CHECK(a.is_cuda() && b.is_cuda() && a.device() == c.device() && b.device() == c.device(), context,
            ": a, b and c must be on one cuda device, got ", a.device().str(), ", ", b.device().str(), " and ",
            c.device().str());
  HYB_CHECK(c.is_contiguous(), context, ": c must be contiguous");
  HYB_CHECK(batch < (int64_t(1) << 31), context, ": cuBLASLt takes fewer than 2^31 batches");
  if (bias) {
    HYB_CHECK(bias->is_cuda() && bias->device() == c.device() && bias->dim() == 1 && bias->size(0) == N &&
                  bias->is_contiguous(),
              context, ": bias must be a contiguous (", N, ",) tensor on ", c.device().str(), ", got ", bias->str());
    HYB_CHECK(bias->dtype() == c.dtype() || bias->dtype() == DType::f32, context, ": bias must be f32 or ",
              dtype_name(c.dtype()), ", got ", dtype_name(bias->dtype()));
  }
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) {  // empty inner dimension: only the beta c (and bias) terms remain; cuBLASLt rejects k = 0
    Shape row_broadcast(size_t(c.dim()), 0);
    row_broadcast.back() = 1;
    if (bias) c.copy_(bias->as_strided(c.shape(), row_broadcast, bias->offset()));
    else if (beta == 0) c.zero_();
    else scale_(c, beta);
    return;
  }

  // cuBLASLt takes the bias in the output's dtype (an fp32 bias with a bf16 output is refused with
  // CUBLAS_STATUS_INVALID_VALUE by cuBLASLt 13.0 on sm_90): a bf16 output gets its fp32 bias rounded to
  // bf16, then added to the fp32 accumulator before the output is rounded.
  Tensor bias_cast;
  if (bias && bias->dtype() != c.dtype()) {
    bias_cast = bias->to(c.dtype());
    bias = &bias_cast;
  }
  Operand oa = prepare(a, ta), ob = prepare(b, tb);
  int64_t rows = M, gemm_batch = batch;
  if (shared_b) {
    if (oa.trans) oa = {a.contiguous(), false, K, M * K};  // a transposed view cannot fold its batch into rows
    rows = batch * M;
    gemm_batch = 1;
  }
  const int device = c.device().index;
  const size_t elem = dtype_size(c.dtype());
  PlanKey key{};
  key.device = device;
  key.dtype = c.dtype();
  key.bias = bias != nullptr;
  key.trans_a = ob.trans;
  key.trans_b = oa.trans;
  key.m = N;
  key.n = rows;
  key.k = K;
  key.lda = ob.ld;
  key.ldb = oa.ld;
  key.ldc = N;
  key.batch = gemm_batch;
  key.stride_a = ob.batch_stride;
  key.stride_b = oa.batch_stride;
  key.stride_c = M * N;
  key.align_a = alignment(ob.t.raw_data(), ob.batch_stride * int64_t(elem), gemm_batch);
  key.align_b = alignment(oa.t.raw_data(), oa.batch_stride * int64_t(elem), gemm_batch);
  key.align_c = alignment(c.raw_data(), M * N * int64_t(elem), gemm_batch);

  CudaDeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  GemmCache& cache = gemm_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  DeviceGemm& dg = device_gemm(cache, device);
  auto lookup = [&]() -> const Plan& {
    auto it = cache.plans.find(key);
    if (it == cache.plans.end()) it = cache.plans.emplace(key, make_plan(key, dg.handle, context)).first;
    return it->second;
  };
  const Plan& plan = lookup();
  HYB_CHECK(plan.found, context, ": cuBLASLt has no algorithm for this shape, dtype and alignment (a ",
            key.align_b, " B, b ", key.align_a, " B, c ", key.align_c, " B aligned)");
  if (bias) {
    const void* bias_ptr = bias->raw_data();
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr, context);
  }
  const float alpha32 = float(alpha), beta32 = float(beta);
  const bool f64 = c.dtype() == DType::f64;
  const void* alpha_ptr = f64 ? static_cast<const void*>(&alpha) : &alpha32;
  const void* beta_ptr = f64 ? static_cast<const void*>(&beta) : &beta32;
  lt_check(cublasLtMatmul(dg.handle, plan.desc, alpha_ptr, ob.t.raw_data(), plan.layout_a, oa.t.raw_data(),
                          plan.layout_b, beta_ptr, c.raw_data(), plan.layout_c, c.raw_data(), plan.layout_c,
                          &plan.algo, dg.workspace, kWorkspaceBytes, stream),
           "cublasLtMatmul", context);
  if (cuda_sync_launches()) {
    const cudaError_t err = cudaStreamSynchronize(stream);
    HYB_CHECK(err == cudaSuccess, context, ": cublasLtMatmul failed while running (HYBRID_CUDA_SYNC=1): ",
              cuda_error_string(err));
  }
}

}  // namespace

void matmul_into_cuda(const Tensor& c, const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t batch, int64_t M,
                      int64_t N, int64_t K, bool shared_b, double alpha, double beta) {
  gemm("matmul_into_cuda", c, a, b, nullptr, ta, tb, batch, M, N, K, shared_b, alpha, beta);
}

void matmul_bias_into_cuda(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor& bias, bool ta, bool tb,
                           int64_t batch, int64_t M, int64_t N, int64_t K, bool shared_b) {
  gemm("matmul_bias_into_cuda", c, a, b, &bias, ta, tb, batch, M, N, K, shared_b, 1.0, 0.0);
}

}  // namespace hyb
