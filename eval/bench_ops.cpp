// `hybrid bench ops [--filter NAME[,NAME...]] [--shape TEXT] [--reps N] [--launch-gaps] [--out FILE.jsonl]`:
// times each CUDA kernel (those whose name contains one of the filter's comma-separated parts and whose shape contains
// TEXT, e.g. " T16384 ") with CUDA events (median of N runs after warm-up; device time: the stream is held
// until a run is queued, so the host's launch latency is not counted, see median_ms) and reports it
// against the two ceilings measured in the same
// run: a large device-to-device copy (bytes read + written per second) and a large bf16 GEMM. Every case
// states the bytes it must move and the FLOPs it must do (METHOD.md), so the table says how far each
// kernel is from its floor. Inputs are random, never zeros.
// `hybrid bench decode [--context N] [--reps N] [--launch-gaps] [--out FILE.jsonl]`: one decode step of the core ops
// at a long context (nha.md 9): the NHA step on its constant state against the attention step on a
// KV cache of N positions, microseconds per step and the bytes each must read.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "eval/records.h"
#include "train/cli.h"

#if HYBRID_CUDA
#include <cuda_profiler_api.h>

#include "autograd/ops/binary.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/softmax.h"
#include "autograd/ops/unary.h"
#include "autograd/tape.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "core/cuda/cuda_device.h"
#include "layers/conv1d/conv1d_op.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"
#include "layers/gsa/gsa_op.h"
#include "layers/loss/cross_entropy_op.h"
#include "layers/mamba2/simple_gla_op.h"
#include "layers/norm/gated_rmsnorm_op.h"
#include "layers/ssm_decay/ssm_decay_op.h"
#include "layers/mlp/swiglu_op.h"
#include "layers/module.h"
#include "layers/nha/nha_decode.h"
#include "layers/nha/nha_op.h"
#include "layers/pha/dss_op.h"
#include "layers/norm/rmsnorm_op.h"
#include "layers/registry.h"
#include "layers/rope/rope_op.h"
#include "layers/softmax_attention/attention_op.h"
#include "optim/adamw.h"
#endif

namespace hyb {

#if HYBRID_CUDA
namespace {

struct BenchCase {
  std::string name, shape;
  double bytes = 0, flops = 0;  // what the kernel must move / compute
  std::function<void()> run;
};

Tensor random_cuda(const Shape& s, DType dt, uint64_t seed, double std = 1.0) {
  Tensor t = Tensor::empty(s, dt, Device::cuda(0));
  fill_normal(t, seed, "bench.inputs", 0.0, std);
  return t;
}

Tensor uniform_cuda(const Shape& s, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(s, DType::f32, Device::cuda(0));
  fill_uniform(t, seed, "bench.inputs", lo, hi);
  return t;
}

// Holds a stream, a host function waiting on a flag, until release() or 20 ms have passed (a rep that
// itself waits on the device, a copy to the host, cannot be held and runs as queued). The destructor
// releases it and waits for the stream, so the flag outlives the host function even if a rep throws.
class StreamHold {
 public:
  explicit StreamHold(cudaStream_t s) : s_(s) { HYB_CUDA_CHECK(cudaLaunchHostFunc(s, wait_open, &open_)); }
  ~StreamHold() {
    release();
    (void)cudaStreamSynchronize(s_);
  }
  void release() { open_.store(true, std::memory_order_release); }

 private:
  static void CUDART_CB wait_open(void* open) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (!static_cast<std::atomic<bool>*>(open)->load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
  }
  cudaStream_t s_;
  std::atomic<bool> open_{false};
};

// The events time the device work of a rep alone. Each rep starts from an idle GPU, so without the
// hold the first event would fire as soon as it is queued and the time would include the host's
// allocation and launch latency before the first kernel (a few microseconds: ~10% of a 50 us kernel);
// in training the host runs ahead of the GPU and that latency is hidden. `--launch-gaps` times without
// the hold (the host's latency counted, as PyTorch's event timing of an anchor counts it).
struct Timing {
  int reps;
  bool hold;
};

double median_ms(const std::function<void()>& fn, const Timing& t) {
  cudaStream_t s = current_stream(0);
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> ms;
  CudaEvent a(true), b(true);
  for (int i = 0; i < t.reps; ++i) {
    std::optional<StreamHold> hold;
    if (t.hold) hold.emplace(s);
    a.record(s);
    fn();
    b.record(s);
    if (hold) hold->release();
    b.synchronize();
    ms.push_back(a.elapsed_ms(b));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One decode step at `context` past tokens, B = 1 and 8, H = Hkv = 16, D = Dv = 64, bf16: the nha step
// (M = 32, w = 32, token shift, RoPE; a random state of a decode that has wrapped its ring) against
// attention with the query at position `context` over a KV cache of context + 1 keys (the step of
// AttentionMixer::decode). Bytes read: the state, the w ring keys and values, and the popped token's
// gates (nha; it writes the state back as well) against the whole cache (attention).
void decode_comparison(int64_t context, const Timing& timing, const std::string& out, const std::string& device) {
  const DType bf = DType::bf16;
  const int64_t H = 16, D = 64, M = 32, w = 32;
  const RopeTable table = rope_table(10000.0, D, context + 1, std::nullopt, Device::cuda(0));
  std::printf("decode step at context %lld: H %lld, D %lld, bf16; nha M %lld, w %lld\n\n", (long long)context,
              (long long)H, (long long)D, (long long)M, (long long)w);
  std::printf("%-4s %-24s %12s %14s %10s\n", "B", "step", "us/step", "bytes read", "GB/s");
  for (int64_t B : {1, 8}) {
    NhaDecodeState st{random_cuda({B, H, D, M}, DType::f32, 70, 0.3), random_cuda({B, H, M, D}, DType::f32, 71, 0.3),
                      random_cuda({B, w, H, D}, bf, 72), random_cuda({B, w, H, D}, bf, 73),
                      uniform_cuda({B, w, H, M}, 74, 0.0, 0.5), uniform_cuda({B, w, H, M}, 75, -0.5, -0.001)};
    Tensor q = random_cuda({B, 1, H, D}, bf, 76, 0.3), k = random_cuda({B, 1, H, D}, bf, 77, 0.3);
    Tensor v = random_cuda({B, 1, H, D}, bf, 78), s = uniform_cuda({B, 1, H, M}, 79, 0.0, 0.5);
    Tensor g = uniform_cuda({B, 1, H, M}, 80, -0.5, -0.001);
    NhaDecodeParams p;
    p.window = w;
    p.shift = w;
    p.pos = context;
    const double nha_bytes =
        double(st.HK.nbytes() + st.HV.nbytes() + st.ring_k.nbytes() + st.ring_v.nbytes()) + double(B * H * M * 2 * 4);
    const double nha_us = 1e3 * median_ms([&] { nha_decode_step(q, k, v, s, g, Tensor(), &table, st, p); }, timing);
    Tensor kc = random_cuda({B, context + 1, H, D}, bf, 81, 0.3), vc = random_cuda({B, context + 1, H, D}, bf, 82);
    const double att_bytes = double(kc.nbytes() + vc.nbytes());
    const double att_us = 1e3 * median_ms([&] { attention_forward(q, kc, vc, AttentionParams{}, nullptr); }, timing);
    auto report = [&](const char* name, double us, double bytes) {
      std::printf("%-4lld %-24s %12.2f %14.0f %10.0f\n", (long long)B, name, us, bytes, bytes / (us * 1e-6) / 1e9);
      if (out.empty()) return;
      Record r("bench.decode", {"bench", "", 0, 0});
      r.add("step", name).add("batch", B).add("context", context).add("us", us).add("bytes_read", bytes);
      r.add("device", device);
      append_record(out, r);
    };
    report("nha_decode_step", nha_us, nha_bytes);
    report("attention_decode_step", att_us, att_bytes);
    std::printf("     nha / attention: %.3f\n", nha_us / att_us);
  }
}

bool matches_filter(const std::string& name, const std::string& filter) {
  if (filter.empty()) return true;
  for (size_t start = 0; start <= filter.size();) {
    const size_t end = std::min(filter.find(',', start), filter.size());
    const std::string part = filter.substr(start, end - start);
    if (!part.empty() && name.find(part) != std::string::npos) return true;
    start = end + 1;
  }
  return false;
}

// The cases whose name passes `filter`. A family's inputs (all of them together are ~15 GB, and
// making them took most of a filtered run's time) are made only when one of its cases is wanted.
std::vector<BenchCase> make_cases(const std::string& filter) {
  std::vector<BenchCase> cases;
  const DType bf = DType::bf16;
  auto want = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return matches_filter(n, filter); });
  };
  // RMSNorm over d_model 1024, B*T = 32768 rows: forward reads x, w; writes y and rstd. Backward
  // reads x, dy, w, rstd; writes dx and dw (through the per-block partials, ~1 MB, not counted).
  if (want({"rmsnorm_backward", "rmsnorm_forward"})) {
    const int64_t N = 32768, C = 1024;
    Tensor x = random_cuda({N, C}, bf, 1), w = random_cuda({C}, bf, 2);
    RmsNormSaved s;
    rmsnorm_forward(x, w, 1e-5, &s);
    Tensor dy = random_cuda({N, C}, bf, 3);
    cases.push_back({"rmsnorm_forward", "32768x1024 bf16", double(N * C * 2 * 2 + N * 4 + C * 2), double(N * C * 4),
                     [=] { rmsnorm_forward(x, w, 1e-5, nullptr); }});
    cases.push_back({"rmsnorm_backward", "32768x1024 bf16", double(N * C * 2 * 3 + N * 4 + C * 2 * 2),
                     double(N * C * 8), [=] { rmsnorm_backward(s, dy, GradMask{3}); }});
  }
  // RoPE on q (B = 1, T = 32768, 16 heads, D 64): read and write each element once, and read the
  // cos/sin rows of 32768 distinct positions (32 f32 each) once. The backward (rotation by -a) the same.
  if (want({"rope_backward", "rope_forward"})) {
    const int64_t N = 32768, H = 16, D = 64;
    Tensor q = random_cuda({1, N, H, D}, bf, 4), dq = random_cuda({1, N, H, D}, bf, 5);
    RopeTable tab = rope_table(10000.0, D, N, std::nullopt, Device::cuda(0));
    const double bytes = double(N * H * D * 2 * 2 + N * (D / 2) * 4 * 2);
    cases.push_back({"rope_forward", "32768x16x64 bf16", bytes, double(N * H * D * 3), [=] { rope_forward(q, tab, 0); }});
    cases.push_back({"rope_backward", "32768x16x64 bf16", bytes, double(N * H * D * 3),
                     [=] { rope_backward(dq, tab, 0); }});
  }
  // SwiGLU gate at d_ffn 2816, 32768 rows: read a, b; write z. Backward reads a, b, dz; writes da, db.
  if (want({"swiglu_backward", "swiglu_forward"})) {
    const int64_t n = int64_t(32768) * 2816;
    Tensor a = random_cuda({n}, bf, 5), b = random_cuda({n}, bf, 6), dz = random_cuda({n}, bf, 7);
    cases.push_back({"swiglu_forward", "32768x2816 bf16", double(n * 2 * 3), double(n * 6),
                     [=] { swiglu_forward(a, b); }});
    cases.push_back({"swiglu_backward", "32768x2816 bf16", double(n * 2 * 5), double(n * 12),
                     [=] { swiglu_backward({a, b}, dz, GradMask{3}); }});
  }
  // Cross-entropy over the GPT-2 vocabulary: forward reads the logits once; backward reads and
  // writes them once (in place).
  if (want({"cross_entropy_backward", "cross_entropy_forward"})) {
    const int64_t N = 8192, V = 50304;
    Tensor z = random_cuda({N, V}, bf, 8, 2.0);
    std::vector<int32_t> t(static_cast<size_t>(N));
    RngStream r(1, "bench.targets");
    for (auto& x : t) x = int32_t(r.below(50257));
    Tensor targets = Tensor::from_vector<int32_t>(t, {N}).to(Device::cuda(0));
    CrossEntropyResult res = cross_entropy_forward(z, targets, 50257, -1);
    CrossEntropySaved s{z, targets, res.lse, 50257, -1, res.count()};
    cases.push_back({"cross_entropy_forward", "8192x50304 bf16", double(N * V * 2), double(N * V * 3),
                     [=] { cross_entropy_forward(z, targets, 50257, -1); }});
    cases.push_back({"cross_entropy_backward", "8192x50304 bf16 in place", double(N * V * 2 * 2), double(N * V * 4),
                     [=] { cross_entropy_backward(s, 1.0); }});
  }
  // Bias add, (32768, 1024) + (1024,) broadcast: read x (b stays in cache), write y.
  if (want({"add_broadcast_forward"})) {
    const int64_t N = 32768, C = 1024;
    Tensor x = random_cuda({N, C}, bf, 20), b = random_cuda({C}, bf, 21);
    cases.push_back({"add_broadcast_forward", "32768x1024 + 1024 bf16", double(N * C * 2 * 2 + C * 2), double(N * C),
                     [=] { binary_forward(BinaryOp::add, x, b); }});
  }
  // silu at the SwiGLU width: read and write each element once.
  if (want({"silu_forward"})) {
    const int64_t n = int64_t(32768) * 2816;
    Tensor x = random_cuda({n}, bf, 22);
    cases.push_back({"silu_forward", "32768x2816 bf16", double(n * 2 * 2), double(n * 4),
                     [=] { unary_forward(UnaryOp::silu, x); }});
  }
  // softmax over the padded GPT-2 vocabulary: read the logits once, write the probabilities once.
  if (want({"softmax_forward"})) {
    const int64_t N = 8192, V = 50304;
    Tensor z = random_cuda({N, V}, bf, 23, 2.0);
    cases.push_back({"softmax_forward", "8192x50304 bf16", double(N * V * 2 * 2), double(N * V * 5),
                     [=] { softmax_forward(z); }});
  }
  // Sums over the last dim (rows) and over the first (columns, a bias gradient): read x once.
  if (want({"sum_first_dim", "sum_last_dim"})) {
    const int64_t N = 32768, C = 4096;
    Tensor x = random_cuda({N, C}, bf, 24);
    cases.push_back({"sum_last_dim", "32768x4096 bf16 -> 32768", double(N * C * 2 + N * 2), double(N * C),
                     [=] { sum_forward(x, {-1}, false); }});
    cases.push_back({"sum_first_dim", "32768x4096 bf16 -> 4096", double(N * C * 2 + C * 2), double(N * C),
                     [=] { sum_forward(x, {0}, false); }});
  }
  // AdamW over 124M parameters in 148 tensors: read p, g, m, v; write p, m, v (f32).
  if (want({"adamw_step"})) {
    std::vector<OptimParam> ps;
    int64_t total = 0;
    for (int i = 0; i < 148; ++i) {
      const int64_t n = i % 12 == 0 ? 768 : 768 * 1087;
      Var v(random_cuda({n}, DType::f32, 100 + uint64_t(i), 0.02), true);
      v.set_grad(random_cuda({n}, DType::f32, 400 + uint64_t(i), 1e-3));
      ps.push_back({str_cat("p", i), v, 0.1});
      total += n;
    }
    auto opt = std::make_shared<AdamW>(ps, AdamWHyper{});
    cases.push_back({"adamw_step", str_cat(total / 1000000, "M f32 params, 148 tensors"), double(total * 4 * 7),
                     double(total * 12), [=] { opt->step(1.0); }});
  }
  // Causal attention fwd+bwd, B*T = 32768, 16 heads, D 64 (attention.md 4.5: fwd+bwd = 3.5 x fwd FLOPs).
  if (want({"attention_causal_fwd_bwd", "attention_window512_fwd_bwd"})) {
    for (int64_t T : {1024, 2048, 4096, 8192, 16384}) {
      const int64_t B = 32768 / T, H = 16, D = 64;
      Tensor q = random_cuda({B, T, H, D}, bf, 10), k = random_cuda({B, T, H, D}, bf, 11);
      Tensor v = random_cuda({B, T, H, D}, bf, 12), dout = random_cuda({B, T, H, D}, bf, 13);
      for (int64_t w : {int64_t(0), int64_t(512)}) {
        if (w > 0 && T != 16384) continue;
        AttentionParams p;
        p.window = w;
        const double keys = w == 0 ? double(T) / 2 : double(w);
        const double fwd = 4.0 * double(B * H * T) * keys * double(D);
        cases.push_back({w == 0 ? "attention_causal_fwd_bwd" : "attention_window512_fwd_bwd",
                         str_cat("B", B, " T", T, " H16 D64 bf16"), double(B * T * H * D * 2 * 8), 3.5 * fwd, [=] {
                           AttentionSaved s;
                           attention_forward(q, k, v, p, &s);
                           attention_backward(s, dout, Tensor(), GradMask{7});
                         }});
      }
    }
  }
  // Mamba2 short conv at d_model 1024 (d_ssm 2048, N 128, G 1: 2304 channels), W 4, B*T = 32768.
  if (want({"conv1d_silu_backward", "conv1d_silu_forward"})) {
    // Forward reads x and writes y; backward reads x and dy, writes dx (the dw partials are 64 rows).
    const int64_t B = 8, T = 4096, C = 2304, W = 4;
    Tensor x = random_cuda({B, T, C}, bf, 20), w = random_cuda({C, W}, bf, 21, 0.5), b = random_cuda({C}, bf, 22);
    Tensor dy = random_cuda({B, T, C}, bf, 23);
    const Conv1dSaved s{x, w, b, Tensor()};
    const double n = double(B * T * C);
    cases.push_back({"conv1d_silu_forward", "32768x2304 W4 bf16", n * 2 * 2, n * (2 * W + 5),
                     [=] { causal_conv1d_silu_forward(x, w, b, Tensor(), nullptr); }});
    cases.push_back({"conv1d_silu_backward", "32768x2304 W4 bf16", n * 2 * 3, n * (4 * W + 10),
                     [=] { causal_conv1d_silu_backward(s, dy, GradMask{7}); }});
  }
  // Mamba2 gated RMSNorm (gate, then norm over d_ssm 2048, G 1), B*T = 32768 rows.
  if (want({"gated_rmsnorm_backward", "gated_rmsnorm_forward"})) {
    const int64_t N = 32768, C = 2048;
    Tensor x = random_cuda({N, 1, C}, bf, 24), z = random_cuda({N, 1, C}, bf, 25), w = random_cuda({1, C}, bf, 26);
    Tensor dy = random_cuda({N, 1, C}, bf, 27);
    GatedRmsNormSaved s;
    gated_rmsnorm_forward(x, z, w, 1e-5, GatedNormOrder::gate_then_norm, &s);
    const double n = double(N * C);
    cases.push_back({"gated_rmsnorm_forward", "32768x2048 bf16", n * 2 * 3 + N * 4, n * 10, [=] {
                       gated_rmsnorm_forward(x, z, w, 1e-5, GatedNormOrder::gate_then_norm, nullptr);
                     }});
    cases.push_back({"gated_rmsnorm_backward", "32768x2048 bf16", n * 2 * 5 + N * 4, n * 20,
                     [=] { gated_rmsnorm_backward(s, dy, GradMask{7}); }});
  }
  // The per-head decay, 32768 tokens x 16 heads, f32 (the decay path stays f32).
  if (want({"ssm_decay_backward", "ssm_decay_forward"})) {
    const int64_t N = 32768, H = 16;
    Tensor x = random_cuda({N, H}, DType::f32, 28), bias = random_cuda({H}, DType::f32, 29);
    Tensor A_log = random_cuda({H}, DType::f32, 30, 0.5), ddt = random_cuda({N, H}, DType::f32, 31);
    Tensor dg = random_cuda({N, H}, DType::f32, 32);
    SsmDecaySaved s;
    ssm_decay_forward(x, bias, A_log, 0.0, INFINITY, &s);
    const double n = double(N * H);
    cases.push_back({"ssm_decay_forward", "32768x16 f32", n * 4 * 3, n * 8,
                     [=] { ssm_decay_forward(x, bias, A_log, 0.0, INFINITY, nullptr); }});
    cases.push_back({"ssm_decay_backward", "32768x16 f32", n * 4 * 5, n * 12,
                     [=] { ssm_decay_backward(s, ddt, dg, GradMask{7}); }});
  }
  // simple_gla fwd+bwd, B*T = 32768, chunk 64 (mamba2.md 4.6): the bare core at H 16, K = V = 64 per
  // head, and the Mamba2 SSD core at H 16, P 64, N 64 / 128 with shared B and C (G 1).
  if (want({"simple_gla_fwd_bwd"})) {
    struct Shape4 {
      const char* what;
      int64_t Gq, H, K, V;
    };
    for (const Shape4& sh : {Shape4{"", 16, 16, 64, 64}, Shape4{"mamba2 ", 1, 16, 64, 64}, Shape4{"mamba2 ", 1, 16, 128, 64}})
      for (int64_t T : {1024, 2048, 4096, 8192, 16384}) {
        const int64_t B = 32768 / T, C = 64, N = 32768;
        Tensor q = random_cuda({B, T, sh.Gq, sh.K}, bf, 40, 0.3), k = random_cuda({B, T, sh.Gq, sh.K}, bf, 41, 0.3);
        Tensor v = random_cuda({B, T, sh.H, sh.V}, bf, 42), dout = random_cuda({B, T, sh.H, sh.V}, bf, 43);
        Tensor g = uniform_cuda({B, T, sh.H}, 44, -0.05, -0.001);
        const double r = double(sh.Gq) / double(sh.H);
        const double fwd = double(N * sh.H) * (2.0 * C * sh.K * r + 2.0 * C * sh.V + 4.0 * sh.K * sh.V);
        const double bwd = double(N * sh.H) * (6.0 * C * sh.K * r + 4.0 * C * sh.V + 10.0 * sh.K * sh.V);
        const double qk = double(N * sh.Gq * sh.K * 2), vv = double(N * sh.H * sh.V * 2), gg = double(N * sh.H * 4);
        // forward: q, k, v, g in, o out; backward: q, k, v, g, dO in, dq, dk, dv, dg out.
        const double bytes = (2 * qk + vv + gg + vv) + (2 * qk + 2 * vv + gg + 2 * qk + vv + gg);
        SimpleGlaParams p;
        p.scale = 1.0;
        cases.push_back({"simple_gla_fwd_bwd",
                         str_cat(sh.what, "B", B, " T", T, " H", sh.H, " Gq", sh.Gq, " K", sh.K, " V", sh.V, " bf16"),
                         bytes, fwd + bwd, [=] {
                           SimpleGlaSaved s;
                           simple_gla_forward(q, k, v, g, Tensor(), p, &s);
                           simple_gla_backward(s, dout, Tensor(), GradMask{15});
                         }});
      }
  }
  // The Mamba2 mixer at the spec's defaults for d_model 1024 (mamba2.md 2: d_ssm 2048, 32 heads of 64,
  // d_state 128, one group, conv 4) fwd+bwd through the tape as training runs it: f32 master
  // parameters cast to bf16 in the layer, bf16 activations. FLOPs:
  // the two projections (x3 for the backward) plus the SSD core's count; the bytes of a composite
  // are not a floor, so the case reports time and TFLOP/s only.
  if (want({"mamba2_block_fwd_bwd"})) {
    const int64_t N = 32768, d_model = 1024;
    for (int64_t T : {1024, 2048, 4096, 8192, 16384}) {
      Json written = Json::parse(R"({"type": "mamba2"})");
      LayerConfigContext lc;
      lc.d_model = d_model;
      lc.max_seq_len = T;
      lc.num_layers = 1;
      find_layer("mamba2")->resolve_config(written, lc);
      const nlohmann::json mixer = nlohmann::json::parse(written.dump());
      MixerContext mc;
      mc.d_model = d_model;
      mc.num_layers = 1;
      mc.max_seq_len = T;
      std::shared_ptr<Mixer> layer;
      {
        ParameterScope scope(Device::cuda(0));
        layer = make_mixer(mixer, mc);
      }
      layer->initialize(70);
      const int64_t d_ssm = mixer.at("d_ssm"), Nst = mixer.at("d_state"), P = mixer.at("headdim");
      const int64_t G = mixer.at("ngroups"), H = d_ssm / P, in_width = 2 * d_ssm + 2 * G * Nst + H;
      const double proj = 2.0 * double(N) * double(d_model) * double(in_width + d_ssm);
      const double ssd = double(N * H) * ((2.0 + 6.0) * 64 * Nst * double(G) / double(H) + (2.0 + 4.0) * 64 * P +
                                          (4.0 + 10.0) * Nst * P);
      const Var x(random_cuda({N / T, T, d_model}, bf, 71), true);
      const Tensor dy = random_cuda({N / T, T, d_model}, bf, 72);
      cases.push_back({"mamba2_block_fwd_bwd", str_cat("B", N / T, " T", T, " d_model ", d_model, " N", Nst, " bf16"), 0,
                       3 * proj + ssd, [=] { backward(layer->forward(x), dy); }});
    }
  }
  // gated_delta_rule fwd+bwd, B*T = 32768, chunk 64 (gated_deltanet.md 4.7): H = HV = 16, K = V = 64,
  // and the NAtS-L shape at d 1024: H 6, K 128, V 256.
  if (want({"gated_delta_rule_fwd_bwd"})) {
    struct Shape4 {
      int64_t H, K, V;
    };
    for (const Shape4& sh : {Shape4{16, 64, 64}, Shape4{6, 128, 256}})
      for (int64_t T : {1024, 2048, 4096, 8192, 16384}) {
        const int64_t B = 32768 / T, C = 64, N = 32768;
        Tensor q = random_cuda({B, T, sh.H, sh.K}, bf, 50, 1.0 / std::sqrt(double(sh.K)));
        Tensor k = random_cuda({B, T, sh.H, sh.K}, bf, 51, 1.0 / std::sqrt(double(sh.K)));
        Tensor v = random_cuda({B, T, sh.H, sh.V}, bf, 52), dout = random_cuda({B, T, sh.H, sh.V}, bf, 53);
        Tensor beta = uniform_cuda({B, T, sh.H}, 54, 0.05, 0.95), g = uniform_cuda({B, T, sh.H}, 55, -0.05, -0.001);
        const double Kd = double(sh.K), Vd = double(sh.V);
        const double fwd = double(N * sh.H) * (2.0 * C * (3 * Kd + 2 * Vd) + 6 * Kd * Vd + 2.0 / 3.0 * C * C);
        const double bwd = double(N * sh.H) * (18.0 * C * Kd + 10.0 * C * Vd + 16 * Kd * Vd + 4.0 * C * C);
        const double qk = double(N * sh.H) * Kd * 2, vv = double(N * sh.H) * Vd * 2, gb = double(N * sh.H * 4);
        // forward: q, k, v, g, beta in, o out; backward: those and dO in, their gradients out.
        const double bytes = (2 * qk + vv + 2 * gb + vv) + (2 * qk + 2 * vv + 2 * gb + 2 * qk + vv + 2 * gb);
        cases.push_back({"gated_delta_rule_fwd_bwd",
                         str_cat("B", B, " T", T, " H", sh.H, " K", sh.K, " V", sh.V, " bf16"), bytes, fwd + bwd, [=] {
                           GatedDeltaSaved s;
                           gated_delta_rule_forward(q, k, v, beta, g, Tensor(), GatedDeltaParams{}, &s);
                           gated_delta_rule_backward(s, dout, Tensor(), GradMask{31});
                         }});
      }
  }
  // gsa m = 64 and nha m = 32, w = 32 (token shift 32, RoPE on the window) fwd+bwd, B*T = 32768,
  // Hq = Hkv = 16, head dims 64, bf16 with s and g in f32 (gsa.md 4.6 and 4.8, nha.md 6).
  if (want({"gsa_fwd_bwd", "gsa_fwd_bwd_kept", "nha_fwd_bwd", "nha_fwd_bwd_kept", "nha_fwd_bwd_kept_qk"})) {
    // FLOPs: gsa.md 4.6's tile units (fwd 8, bwd 22 units of 8192 per token-head); nha.md 6's dense
    // tiles (fwd 65.5 kFLOP per token-head, bwd 2x fwd + one state recompute); the state recompute (gsa
    // B0, 2 units) is left out where the forward keeps its memories. Bytes: the minimal
    // fused traffic: fwd reads q, k, v, s, g and writes o, lse; bwd reads those, dO and lse and writes
    // dq, dk, dv, ds, dg.
    const int64_t H = 16, D = 64, N = 32768;
    for (int64_t M : {64, 32})
      for (int64_t T : {1024, 2048, 4096, 8192, 16384}) {
        const int64_t B = N / T;
        const bool nha = M == 32;
        Tensor q = random_cuda({B, T, H, D}, bf, 60, 0.3), k = random_cuda({B, T, H, D}, bf, 61, 0.3);
        Tensor v = random_cuda({B, T, H, D}, bf, 62), dout = random_cuda({B, T, H, D}, bf, 63);
        Tensor s = uniform_cuda({B, T, H, M}, 64, 0.0, 0.5), g = uniform_cuda({B, T, H, M}, 65, -0.5, -0.001);
        const double th = double(N * H), act = th * D * 2, slot = th * M * 4, lse = th * 4;
        const double bytes = (3 * act + 2 * slot + act + lse) + (4 * act + 2 * slot + lse + 3 * act + 2 * slot);
        const double fwd = th * (nha ? 65536.0 : 8 * 8192.0), bwd = th * (nha ? 2 * 65536.0 + 8192.0 : 22 * 8192.0);
        const double recompute = th * (nha ? 8192.0 : 2 * 8192.0);
        if (!nha) {
          for (bool keep : {false, true}) {  // the op's default, then save_chunk_states (the forward's memories kept)
            GsaParams p;
            p.save_chunk_states = keep;
            cases.push_back({keep ? "gsa_fwd_bwd_kept" : "gsa_fwd_bwd",
                             str_cat("B", B, " T", T, " H", H, " K V 64 M", M, " bf16"), bytes,
                             fwd + bwd - (keep ? recompute : 0.0), [=] {
                               GsaSaved sv;
                               gsa_forward(q, k, v, s, g, Tensor(), Tensor(), p, &sv);
                               gsa_backward(sv, dout, Tensor(), Tensor(), GradMask{31});
                             }});
          }
        } else {
          // The op's default, then save_chunk_states, then that and save_window_qk (the rotated q, k kept).
          for (int keep : {0, 1, 2}) {
            NhaParams p;
            p.window = 32;
            p.shift = 32;
            p.rope_table = rope_table(10000.0, 64, T, std::nullopt, Device::cuda(0));  // a layer's cached table
            p.save_chunk_states = keep >= 1;
            p.save_window_qk = keep == 2;
            cases.push_back({keep == 0 ? "nha_fwd_bwd" : keep == 1 ? "nha_fwd_bwd_kept" : "nha_fwd_bwd_kept_qk",
                             str_cat("B", B, " T", T, " H", H, " D 64 M", M, " w32 bf16"), bytes,
                             fwd + bwd - (keep >= 1 ? recompute : 0.0), [=] {
                               NhaSaved sv;
                               nha_forward(q, k, v, s, g, Tensor(), Tensor(), Tensor(), p, &sv);
                               nha_backward(sv, dout, Tensor(), Tensor(), GradMask{31});
                             }});
          }
        }
      }
  }
  // PHA's DSS convolution fwd+bwd (pha.md 4.5, 4.6), fp32, B*T = 24576 (the PHA paper's 24 x 1024),
  // Hs 256, Ns 512. FLOPs: the kernel GEMM against the basis zero-padded to n columns (2 Hs 2Ns n) and
  // the backward's two; real FFTs at 2.5 n log2 n (the forward: K, v and the inverse; the backward: v
  // again, dy, dv's and dK's inverses). Bytes: v and y, then dy, v and dv, fp32 (the FFT buffers are
  // not a floor).
  if (want({"dss_fwd_bwd"})) {
    const int64_t N = 24576, Hs = 256, Ns = 512;
    for (int64_t T : {1024, 2048, 4096, 8192}) {
      const int64_t B = N / T, n = dss_fft_length(T);
      DssInputs in;
      in.v = random_cuda({B, T, Hs}, DType::f32, 80);
      in.lambda_re = random_cuda({Ns}, DType::f32, 81);
      in.lambda_im = random_cuda({Ns}, DType::f32, 82);
      in.c_re = random_cuda({Hs, Ns}, DType::f32, 83);
      in.c_im = random_cuda({Hs, Ns}, DType::f32, 84);
      in.d = random_cuda({Hs}, DType::f32, 85);
      const Tensor dy = random_cuda({B, T, Hs}, DType::f32, 86);
      const double fft = 2.5 * double(n) * std::log2(double(n));
      const double gemm = 2.0 * double(Hs) * double(2 * Ns) * double(n);
      const double flops = 3 * gemm + fft * double(Hs + 2 * B * Hs) + fft * double(3 * B * Hs + Hs);
      const double act = double(N * Hs * 4);
      cases.push_back({"dss_fwd_bwd", str_cat("B", B, " T", T, " Hs", Hs, " Ns", Ns, " n", n, " f32"), 5 * act, flops,
                       [=] {
                         DssSaved sv;
                         dss_forward(in, &sv);
                         dss_backward(sv, dy, GradMask{63});
                       }});
    }
  }
  // The PHA-180M block (pha.md 10: d 768, GQA 12/4 of 64 with cosine logits, GSS F 3072, Hs 256, Ns 512,
  // aux FFN 960, main FFN 1920) fwd+bwd through the tape as training runs it, bf16 activations, at
  // B*T = 24576. FLOPs: 6 N per Linear weight, attention's 12 Hq D (T+1)/2 per token (eval.md 7.1),
  // and the DSS's count above; a composite, so time and TFLOP/s only.
  if (want({"pha_block_fwd_bwd"})) {
    const int64_t N = 24576, d_model = 768;
    for (int64_t T : {1024, 2048, 4096, 8192}) {
      Json written = Json::parse(R"({"type": "pha", "dropout": 0.0,
          "attn": {"type": "attention", "num_heads": 12, "num_kv_heads": 4, "head_dim": 64, "logits": "cosine"},
          "gss": {"expand": 4, "dss_dim": 256, "dss_state": 512},
          "aux_mlp": {"type": "swiglu", "expansion": 1.25, "multiple_of": 1}})");
      LayerConfigContext lc;
      lc.d_model = d_model;
      lc.max_seq_len = T;
      lc.num_layers = 10;
      find_layer("pha")->resolve_config(written, lc);
      BlockContext bc;
      bc.mixer.d_model = d_model;
      bc.mixer.num_layers = 10;
      bc.mixer.max_seq_len = T;
      bc.norm_eps = 1e-6;
      std::shared_ptr<Block> block;
      {
        ParameterScope scope(Device::cuda(0));
        block = find_layer("pha")->make_block(LayerSpec{nlohmann::json::parse(written.dump()), "swiglu", 1920}, bc);
      }
      block->initialize(90);
      double weights = 0;
      for (const NamedParameter& p : block->named_parameters())
        if (p.var.data().dim() == 2 && p.name.ends_with(".weight") && p.name.find(".dss.") == std::string::npos)
          weights += double(p.var.numel());
      const int64_t n = dss_fft_length(T), B = N / T;
      const double fft = 2.5 * double(n) * std::log2(double(n));
      const double dss = 3 * 2.0 * 256 * 1024 * double(n) + fft * double(5 * B * 256 + 2 * 256);
      const double attn = double(N) * 12.0 * 12 * 64 * double(T + 1) / 2;
      const Var x(random_cuda({B, T, d_model}, bf, 91), true);
      const Tensor dy = random_cuda({B, T, d_model}, bf, 92);
      cases.push_back({"pha_block_fwd_bwd", str_cat("B", B, " T", T, " d_model ", d_model, " (PHA-180M) bf16"), 0,
                       6 * double(N) * weights + attn + dss, [=] { backward(block->forward(x), dy); }});
    }
  }
  return cases;
}

}  // namespace
#endif

int cmd_bench_dp(Args& args);

int cmd_bench_decode(Args& args) {
  const int64_t context = args.integer("--context", 16384);
  const int reps = int(args.integer("--reps", 50));
  const bool launch_gaps = args.flag("--launch-gaps");
  const std::string out = args.value("--out", "");
  args.finish();
  HYB_CHECK(context >= 32, "bench decode: --context must be >= 32 (the nha window), got ", context);
#if !HYBRID_CUDA
  (void)reps, (void)launch_gaps, (void)out;
  throw Error("bench decode: this build has no CUDA backend (configure with -DHYBRID_CUDA=ON)");
#else
  HYB_CHECK(cuda_device_count() > 0, "bench decode: no CUDA device is visible");
  const auto& props = cuda_device_props(0);
  std::printf("device: %s, %d SMs\n", props.name.c_str(), props.sm_count);
  decode_comparison(context, Timing{reps, !launch_gaps}, out, props.name);
  return 0;
#endif
}

int cmd_bench(Args& args) {
  const std::optional<std::string> what = args.subcommand();
  if (what == "dp") return cmd_bench_dp(args);
  if (what == "decode") return cmd_bench_decode(args);
  HYB_CHECK(what == "ops", "bench: expected `hybrid bench ops`, `hybrid bench decode` or `hybrid bench dp`, got \"",
            what.value_or(""), "\"");
  const std::string filter = args.value("--filter", "");
  const std::string shape = args.value("--shape", "");
  const int reps = int(args.integer("--reps", 20));
  const bool launch_gaps = args.flag("--launch-gaps");
  const std::string out = args.value("--out", "");
  args.finish();
#if !HYBRID_CUDA
  (void)filter, (void)shape, (void)reps, (void)launch_gaps, (void)out;
  throw Error("bench ops: this build has no CUDA backend (configure with -DHYBRID_CUDA=ON)");
#else
  HYB_CHECK(cuda_device_count() > 0, "bench ops: no CUDA device is visible");
  const auto& props = cuda_device_props(0);
  const Timing timing{reps, !launch_gaps};
  // Ceilings measured now: a 2 GiB device-to-device copy and an 8192^3 bf16 GEMM.
  Tensor src = random_cuda({int64_t(1) << 30}, DType::bf16, 90), dst = Tensor::empty({int64_t(1) << 30}, DType::bf16, Device::cuda(0));
  const double copy_ms = median_ms([&] { dst.copy_(src); }, timing);
  const double copy_gbs = 2.0 * double(src.nbytes()) / (copy_ms * 1e-3) / 1e9;
  Tensor a = random_cuda({8192, 8192}, DType::bf16, 91), b = random_cuda({8192, 8192}, DType::bf16, 92);
  Tensor c = Tensor::empty({8192, 8192}, DType::bf16, Device::cuda(0));
  const double gemm_ms = median_ms([&] { matmul_into(c, a, b, false, true); }, timing);
  const double gemm_tflops = 2.0 * 8192.0 * 8192.0 * 8192.0 / (gemm_ms * 1e-3) / 1e12;
  src = dst = a = b = c = Tensor();
  std::printf("device: %s, %d SMs\nceilings: copy %.0f GB/s (%.3f ms for 2 x 2 GiB), bf16 GEMM %.0f TFLOP/s (%.3f ms at 8192^3)\n\n",
              props.name.c_str(), props.sm_count, copy_gbs, copy_ms, gemm_tflops, gemm_ms);
  std::printf("%-30s %-32s %10s %10s %8s %10s %8s\n", "kernel", "shape", "ms", "GB/s", "%copy", "TFLOP/s", "%gemm");
  for (const BenchCase& bc : make_cases(filter)) {
    if (!matches_filter(bc.name, filter) || (" " + bc.shape + " ").find(shape) == std::string::npos) continue;
    double ms = 0;
    try {
      // Only the cases' own launches fall inside a profiler range (ncu --profile-from-start off), not the
      // input set-up or the ceilings.
      cudaProfilerStart();
      ms = median_ms(bc.run, timing);
      cudaProfilerStop();
    } catch (const Error& e) {
      cudaProfilerStop();
      std::printf("%-30s %-32s %s\n", bc.name.c_str(), bc.shape.c_str(), e.what());
      continue;
    }
    const double gbs = bc.bytes / (ms * 1e-3) / 1e9, tflops = bc.flops / (ms * 1e-3) / 1e12;
    if (bc.bytes > 0)
      std::printf("%-30s %-32s %10.3f %10.0f %7.0f%% %10.1f %7.0f%%\n", bc.name.c_str(), bc.shape.c_str(), ms, gbs,
                  100 * gbs / copy_gbs, tflops, 100 * tflops / gemm_tflops);
    else
      std::printf("%-30s %-32s %10.3f %10s %8s %10.1f %7.0f%%\n", bc.name.c_str(), bc.shape.c_str(), ms, "-", "-", tflops,
                  100 * tflops / gemm_tflops);
    if (!out.empty()) {
      Record r("bench.ops", {"bench", "", 0, 0});
      r.add("kernel", bc.name).add("shape", bc.shape).add("ms", ms).add("gb_per_s", gbs).add("tflops", tflops);
      r.add("copy_gb_per_s", copy_gbs).add("gemm_tflops", gemm_tflops).add("device", props.name);
      append_record(out, r);
    }
    std::fflush(stdout);  // a row per case as it ends, also into a file under a timeout that may cut the run
  }
  return 0;
#endif
}

}  // namespace hyb
