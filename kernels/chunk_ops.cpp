// The chunk toolkit (chunk_ops.h): shared construction, the device branch of every primitive, and the
// CPU twins. The twins are plain loops in the order of the math, reading views through the same
// chunk_at as the kernels; they exist so that the CPU tests run the ops' kernel sequences, not for
// speed. Sums are accumulated in double on the CPU (the kernels use fp32).
#include "kernels/chunk_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"

namespace hyb {

namespace {

ChunkView::Type view_type(DType t) {
  switch (t) {
    case DType::f32: return ChunkView::f32;
    case DType::bf16: return ChunkView::bf16;
    case DType::f64: return ChunkView::f64;
    default: break;
  }
  HYB_ASSERT(false, "chunk toolkit: unsupported dtype ", dtype_name(t));
  return ChunkView::f32;
}

bool on_cuda(const ChunkDims& d) { return d.device.is_cuda(); }

#if !HYBRID_CUDA
[[noreturn]] void no_cuda(const char* what) {
  throw Error(str_cat(what, ": cuda tensors in a build without CUDA"));
}
#endif

}  // namespace

ChunkDims chunk_dims(int64_t B, int64_t T, int64_t H, Device device) {
  return ChunkDims{B, T, H, (T + kScanChunk - 1) / kScanChunk, device};
}

ChunkView token_view(const Tensor& x, int64_t hdiv) {
  HYB_ASSERT(x.dim() == 4 && x.is_contiguous(), "token_view needs a contiguous (B, T, heads, width) tensor, got ",
             x.str());
  const int64_t T = x.size(1), heads = x.size(2), width = x.size(3);
  ChunkView v;
  v.p = x.raw_data();
  v.type = view_type(x.dtype());
  HYB_ASSERT(!x.is_cuda() || v.type != ChunkView::f64, "token_view: f64 on cuda");
  v.sb = T * heads * width, v.sh = width, v.sc = kScanChunk * heads * width, v.sr = heads * width, v.scol = 1;
  v.rows = kScanChunk, v.cols = int(width);
  v.hdiv = int(hdiv);
  v.tok = 1;
  return v;
}

ChunkBuffer::ChunkBuffer(const ChunkDims& d, int64_t slots_, int64_t rows_, int64_t cols_)
    : t(Tensor::empty({d.B, d.H, slots_, rows_, cols_}, DType::f32, d.device)),
      slots(slots_),
      rows(int(rows_)),
      cols(int(cols_)) {}

ChunkView ChunkBuffer::view(int64_t slot_offset, int tok) const {
  ChunkView v;
  v.p = data() + slot_offset * rows * cols;
  v.sb = t.size(1) * slots * rows * cols, v.sh = slots * rows * cols, v.sc = int64_t(rows) * cols, v.sr = cols;
  v.scol = 1;
  v.rows = rows, v.cols = cols;
  v.tok = tok;
  return v;
}

ChunkVec::ChunkVec(const ChunkDims& d) : t(Tensor::zeros({d.B, d.H, d.NC, kScanChunk}, DType::f32, d.device)) {}

ChunkView scale_by(const ChunkView& v, const ChunkVec& s) {
  HYB_ASSERT(v.tok != 0 && s.t.defined(), "scale_by: a per-token scale needs a token axis");
  ChunkView r = v;
  r.scale = s.p();
  r.ssb = s.t.size(1) * s.t.size(2) * kScanChunk, r.ssh = s.t.size(2) * kScanChunk, r.ssc = kScanChunk, r.sst = 1;
  return r;
}

ChunkGates chunk_gates(const Tensor& g, const Tensor& beta, const ChunkDims& d) {
  HYB_ASSERT(g.is_contiguous() && (!beta.defined() || (beta.is_contiguous() && beta.dtype() == g.dtype())),
             "chunk_gates: g and beta must be contiguous and of one dtype");
  ChunkGates r;
  r.G = ChunkVec(d), r.gam = ChunkVec(d), r.kd = ChunkVec(d);
  if (beta.defined()) r.beta = ChunkVec(d), r.bg = ChunkVec(d);
  r.Glast = Tensor::zeros({d.B, d.H, d.NC}, DType::f32, d.device);
  if (on_cuda(d)) {
#if HYBRID_CUDA
    HYB_ASSERT(g.dtype() == DType::f32, "chunk_gates: g must be f32 on cuda");
    chunk_cuda::gates(r, g, beta, d);
    return r;
#else
    no_cuda("chunk_gates");
#endif
  }
  visit_float("chunk_gates", g.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E* gp = g.data<E>();
    const E* bp = beta.defined() ? beta.data<E>() : nullptr;
    for (int64_t z = 0; z < d.B * d.H * d.NC; ++z) {
      const int64_t c = z % d.NC, h = (z / d.NC) % d.H, b = z / d.NC / d.H;
      const int n = chunk_tokens(c, d.T);
      float* G = r.G.p() + z * kScanChunk;
      float acc = 0.f;
      for (int i = 0; i < kScanChunk; ++i) {
        if (i < n) acc += float(gp[(b * d.T + c * kScanChunk + i) * d.H + h]);
        G[i] = acc;
      }
      r.Glast.data<float>()[z] = acc;
      for (int i = 0; i < kScanChunk; ++i) {
        const float e = std::exp(G[i]);
        r.gam.p()[z * kScanChunk + i] = e;
        r.kd.p()[z * kScanChunk + i] = std::exp(std::min(acc - G[i], 0.f));
        if (bp) {
          const float bt = i < n ? float(bp[(b * d.T + c * kScanChunk + i) * d.H + h]) : 0.f;
          r.beta.p()[z * kScanChunk + i] = bt;
          r.bg.p()[z * kScanChunk + i] = bt * e;
        }
      }
    }
  });
  return r;
}

void chunk_gemm(const ChunkView& out, const ChunkView& x, const ChunkView& y, const ChunkView* z, const Tensor& zlog,
                float alpha, const ChunkDims& d) {
  HYB_ASSERT(x.cols == y.rows && out.rows >= x.rows && out.cols >= y.cols && out.type == ChunkView::f32 &&
                 (!z || z->type == ChunkView::f32),
             "chunk_gemm: shapes (", x.rows, " x ", x.cols, ") @ (", y.rows, " x ", y.cols, ") into (", out.rows, " x ",
             out.cols, ")");
  const float* zl = zlog.defined() ? zlog.data<float>() : nullptr;
  if (on_cuda(d)) {
#if HYBRID_CUDA
    chunk_cuda::gemm(out, x, y, z, zl, alpha, d);
    return;
#else
    no_cuda("chunk_gemm");
#endif
  }
  for (int64_t zi = 0; zi < d.batches(); ++zi) {
    const ChunkBatch q = chunk_batch(zi, d.H, d.c0, d.chunks());
    const float zs = zl ? std::exp(zl[(q.b * d.H + q.h) * d.NC + q.c]) : 1.f;
    for (int m = 0; m < x.rows; ++m)
      for (int n = 0; n < y.cols; ++n) {
        double acc = 0;
        for (int k = 0; k < x.cols; ++k) acc += double(chunk_at(x, q, m, k, d.T)) * chunk_at(y, q, k, n, d.T);
        float v = float(alpha * acc);
        if (z) v += zs * chunk_at(*z, q, m, n, d.T);
        *chunk_ptr(out, q, m, n) = v;
      }
  }
}

void chunk_mask(const ChunkBuffer& a, const ChunkGates* decay, const ChunkVec* rowscale, bool strict,
                const ChunkDims& d, const ChunkBuffer* src) {
  HYB_ASSERT(a.rows == kScanChunk && a.cols == kScanChunk && a.slots == d.NC &&
                 (!src || (src->rows == a.rows && src->cols == a.cols && src->slots == a.slots)),
             "chunk_mask: needs chunk x chunk matrices");
  const float* sp = src ? src->data() : a.data();
  const float* G = decay ? decay->G.p() : nullptr;
  const float* rs = rowscale ? rowscale->p() : nullptr;
  if (on_cuda(d)) {
#if HYBRID_CUDA
    chunk_cuda::mask(a.data(), sp, G, rs, strict, d);
    return;
#else
    no_cuda("chunk_mask");
#endif
  }
  for (int64_t z = 0; z < d.B * d.H * d.NC; ++z) {
    const int n = chunk_tokens(z % d.NC, d.T);
    float* az = a.data() + z * kScanChunk * kScanChunk;
    const float* sz = sp + z * kScanChunk * kScanChunk;
    for (int r = 0; r < kScanChunk; ++r)
      for (int i = 0; i < kScanChunk; ++i) {
        const int e = r * kScanChunk + i;
        if (i > r || (strict && i == r) || r >= n || i >= n) {
          az[e] = 0.f;
          continue;
        }
        float f = G ? std::exp(std::min(G[z * kScanChunk + r] - G[z * kScanChunk + i], 0.f)) : 1.f;
        if (rs) f *= rs[z * kScanChunk + r];
        az[e] = sz[e] * f;
      }
  }
}

void chunk_unit_lower_inverse(const ChunkBuffer& out, const ChunkBuffer& m, const ChunkDims& d) {
  HYB_ASSERT(m.rows == kScanChunk && m.cols == kScanChunk && out.rows == kScanChunk && out.cols == kScanChunk &&
                 m.slots == d.NC && out.slots == d.NC,
             "chunk_unit_lower_inverse: needs chunk x chunk matrices");
  if (on_cuda(d)) {
#if HYBRID_CUDA
    chunk_cuda::unit_lower_inverse(out.data(), m.data(), d);
    return;
#else
    no_cuda("chunk_unit_lower_inverse");
#endif
  }
  constexpr int C = kScanChunk;
  for (int64_t z = 0; z < d.B * d.H * d.NC; ++z) {
    const float* mz = m.data() + z * C * C;
    float* oz = out.data() + z * C * C;
    for (int r = 0; r < C; ++r)
      for (int j = 0; j < C; ++j) {
        if (j >= r) {
          oz[r * C + j] = j == r ? 1.f : 0.f;
          continue;
        }
        double acc = 0;
        for (int i = j; i < r; ++i) acc += double(mz[r * C + i]) * oz[i * C + j];
        oz[r * C + j] = float(-acc);
      }
  }
}

void chunk_axpy(const ChunkView& dst, const ChunkView& src, const Tensor& slog, const ChunkDims& d) {
  HYB_ASSERT(dst.rows == src.rows && dst.cols == src.cols && dst.type == ChunkView::f32, "chunk_axpy: shapes differ");
  const float* sl = slog.defined() ? slog.data<float>() : nullptr;
  if (on_cuda(d)) {
#if HYBRID_CUDA
    chunk_cuda::axpy(dst, src, sl, d);
    return;
#else
    no_cuda("chunk_axpy");
#endif
  }
  for (int64_t zi = 0; zi < d.batches(); ++zi) {
    const ChunkBatch q = chunk_batch(zi, d.H, d.c0, d.chunks());
    const float s = sl ? std::exp(sl[(q.b * d.H + q.h) * d.NC + q.c]) : 1.f;
    for (int r = 0; r < dst.rows; ++r)
      for (int col = 0; col < dst.cols; ++col) *chunk_ptr(dst, q, r, col) += s * chunk_at(src, q, r, col, d.T);
  }
}

void chunk_state_scan(const ChunkBuffer& states, const Tensor& Glast, bool reverse, const ChunkDims& d) {
  HYB_ASSERT(states.slots == d.NC + 1, "chunk_state_scan: needs NC + 1 state slots");
  const int64_t KV = int64_t(states.rows) * states.cols;
  if (on_cuda(d)) {
#if HYBRID_CUDA
    chunk_cuda::state_scan(states.data(), Glast.data<float>(), KV, reverse, d);
    return;
#else
    no_cuda("chunk_state_scan");
#endif
  }
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    float* s = states.data() + bh * (d.NC + 1) * KV;
    const float* gl = Glast.data<float>() + bh * d.NC;
    for (int64_t step = 0; step < d.NC; ++step) {
      const int64_t c = reverse ? d.NC - 1 - step : step;
      const float a = std::exp(gl[c]);
      float* dst = s + (reverse ? c : c + 1) * KV;
      const float* from = s + (reverse ? c + 1 : c) * KV;
      for (int64_t e = 0; e < KV; ++e) dst[e] += a * from[e];
    }
  }
}

void chunk_delta_scan(const ChunkBuffer& states, const ChunkBuffer& T, const ChunkView& A, float sign_a,
                      const ChunkView& Bm, float sign_b, const Tensor& Glast, bool reverse, const ChunkDims& d) {
  HYB_ASSERT(states.slots == d.NC + 1 && T.slots == d.NC && T.rows == kScanChunk && T.cols == states.cols &&
                 A.rows == kScanChunk && A.cols == states.rows && Bm.rows == states.rows && Bm.cols == kScanChunk &&
                 d.nc == 0,
             "chunk_delta_scan: states (", states.rows, " x ", states.cols, "), T (", T.rows, " x ", T.cols, "), A (",
             A.rows, " x ", A.cols, "), Bm (", Bm.rows, " x ", Bm.cols, ")");
  if (on_cuda(d)) {
#if HYBRID_CUDA
    chunk_cuda::delta_scan(states.data(), T.data(), states.rows, states.cols, A, sign_a, Bm, sign_b,
                           Glast.data<float>(), reverse, d);
    return;
#else
    no_cuda("chunk_delta_scan");
#endif
  }
  // The twin: the same recurrence as two GEMMs (and an axpy) per chunk.
  const ChunkView tv = T.view(0, 1), s_c = states.view(0), s_next = states.view(1);
  for (int64_t step = 0; step < d.NC; ++step) {
    const int64_t c = reverse ? d.NC - 1 - step : step;
    const ChunkDims dc = d.at(c);
    chunk_gemm(tv, A, reverse ? s_next : s_c, &tv, Tensor(), sign_a, dc);
    if (reverse) {
      chunk_gemm(s_c, Bm, tv, &s_c, Tensor(), sign_b, dc);
      chunk_axpy(s_c, s_next, Glast, dc);
    } else {
      chunk_gemm(s_next, Bm, tv, &s_c, Glast, sign_b, dc);
    }
  }
}

void chunk_rowdot(const ChunkVec& vec, const ChunkView& x, const ChunkView& y, float alpha, const ChunkDims& d) {
  HYB_ASSERT(x.rows == kScanChunk && y.rows == kScanChunk && x.cols == y.cols && d.nc == 0,
             "chunk_rowdot: needs (chunk x n) views of one width over all chunks");
  if (on_cuda(d)) {
#if HYBRID_CUDA
    chunk_cuda::rowdot(vec.p(), x, y, alpha, d);
    return;
#else
    no_cuda("chunk_rowdot");
#endif
  }
  for (int64_t z = 0; z < d.batches(); ++z) {
    const ChunkBatch q = chunk_batch(z, d.H, 0, d.NC);
    for (int r = 0; r < kScanChunk; ++r) {
      double acc = 0;
      for (int col = 0; col < x.cols; ++col) acc += double(chunk_at(x, q, r, col, d.T)) * chunk_at(y, q, r, col, d.T);
      vec.p()[z * kScanChunk + r] += float(alpha * acc);
    }
  }
}

void chunk_inner_last(const ChunkVec& vec, const ChunkView& a, const ChunkView& b, const ChunkDims& d) {
  HYB_ASSERT(a.rows == b.rows && a.cols == b.cols && d.nc == 0, "chunk_inner_last: shapes differ");
  if (on_cuda(d)) {
#if HYBRID_CUDA
    chunk_cuda::inner_last(vec.p(), a, b, d);
    return;
#else
    no_cuda("chunk_inner_last");
#endif
  }
  for (int64_t z = 0; z < d.batches(); ++z) {
    const ChunkBatch q = chunk_batch(z, d.H, 0, d.NC);
    double acc = 0;
    for (int r = 0; r < a.rows; ++r)
      for (int col = 0; col < a.cols; ++col) acc += double(chunk_at(a, q, r, col, d.T)) * chunk_at(b, q, r, col, d.T);
    vec.p()[z * kScanChunk + chunk_tokens(q.c, d.T) - 1] += float(acc);
  }
}

void chunk_vec_to_tokens(Tensor& out, const ChunkVec& vec, bool reverse_cumsum, const ChunkDims& d) {
  HYB_ASSERT(out.is_contiguous() && out.shape() == Shape({d.B, d.T, d.H}), "chunk_vec_to_tokens: out ", out.str());
  if (on_cuda(d)) {
#if HYBRID_CUDA
    HYB_ASSERT(out.dtype() == DType::f32, "chunk_vec_to_tokens: out must be f32 on cuda");
    chunk_cuda::vec_to_tokens(out.data<float>(), vec.p(), reverse_cumsum, d);
    return;
#else
    no_cuda("chunk_vec_to_tokens");
#endif
  }
  visit_float("chunk_vec_to_tokens", out.dtype(), [&](auto tag) {
    using E = decltype(tag);
    for (int64_t z = 0; z < d.B * d.H * d.NC; ++z) {
      const int64_t c = z % d.NC, h = (z / d.NC) % d.H, b = z / d.NC / d.H;
      float run = 0.f;
      for (int r = chunk_tokens(c, d.T) - 1; r >= 0; --r) {
        const float v = vec.p()[z * kScanChunk + r];
        run = reverse_cumsum ? run + v : v;
        out.data<E>()[(b * d.T + c * kScanChunk + r) * d.H + h] = E(run);
      }
    }
  });
}

void chunk_to_tokens(Tensor& out, const ChunkBuffer& buf, int64_t hpg, const ChunkVec* rowscale, float alpha,
                     const ChunkDims& d) {
  HYB_ASSERT(out.dim() == 4 && out.is_contiguous() && out.size(0) == d.B && out.size(1) == d.T &&
                 out.size(2) * hpg == d.H && out.size(3) == buf.cols && buf.rows == kScanChunk && buf.slots == d.NC &&
                 (hpg == 1 || !rowscale),
             "chunk_to_tokens: out ", out.str(), " does not match the chunk buffer");
  const float* rs = rowscale ? rowscale->p() : nullptr;
  if (on_cuda(d)) {
#if HYBRID_CUDA
    chunk_cuda::to_tokens(out, buf.data(), buf.cols, hpg, rs, alpha, d);
    return;
#else
    no_cuda("chunk_to_tokens");
#endif
  }
  const int64_t Ho = out.size(2), width = buf.cols;
  visit_float("chunk_to_tokens", out.dtype(), [&](auto tag) {
    using E = decltype(tag);
    E* op = out.data<E>();
    for (int64_t e = 0; e < out.numel(); ++e) {
      const int64_t x = e % width, ho = (e / width) % Ho, t = (e / width / Ho) % d.T, b = e / width / Ho / d.T;
      const int64_t c = t / kScanChunk, r = t % kScanChunk;
      double s = 0;
      for (int64_t h = ho * hpg; h < (ho + 1) * hpg; ++h) {
        const int64_t z = (b * d.H + h) * d.NC + c;
        double v = buf.data()[(z * kScanChunk + r) * width + x];
        if (rs) v *= rs[z * kScanChunk + r];
        s += v;
      }
      op[e] = E(alpha * s);
    }
  });
}

void chunk_slot_load(const ChunkBuffer& buf, int64_t slot, const Tensor& src) {
  const int64_t BH = buf.t.size(0) * buf.t.size(1), KV = int64_t(buf.rows) * buf.cols;
  HYB_ASSERT(!src.defined() || (src.is_contiguous() && src.numel() == BH * KV), "chunk_slot_load: src ", src.str());
  if (buf.t.is_cuda()) {
#if HYBRID_CUDA
    HYB_ASSERT(!src.defined() || src.dtype() == DType::f32, "chunk_slot_load: src must be f32 on cuda");
    chunk_cuda::slot_copy(buf.data(), src.defined() ? src.data<float>() : nullptr, BH, buf.slots, slot, KV, true,
                          buf.t.device().index);
    return;
#else
    no_cuda("chunk_slot_load");
#endif
  }
  const Tensor s32 = src.defined() ? src.to(DType::f32) : Tensor();
  for (int64_t e = 0; e < BH * KV; ++e)
    buf.data()[((e / KV) * buf.slots + slot) * KV + e % KV] = s32.defined() ? s32.data<float>()[e] : 0.f;
}

void chunk_slot_store(Tensor& dst, const ChunkBuffer& buf, int64_t slot) {
  const int64_t BH = buf.t.size(0) * buf.t.size(1), KV = int64_t(buf.rows) * buf.cols;
  HYB_ASSERT(dst.is_contiguous() && dst.numel() == BH * KV, "chunk_slot_store: dst ", dst.str());
  if (buf.t.is_cuda()) {
#if HYBRID_CUDA
    HYB_ASSERT(dst.dtype() == DType::f32, "chunk_slot_store: dst must be f32 on cuda");
    chunk_cuda::slot_copy(buf.data(), dst.data<float>(), BH, buf.slots, slot, KV, false, buf.t.device().index);
    return;
#else
    no_cuda("chunk_slot_store");
#endif
  }
  visit_float("chunk_slot_store", dst.dtype(), [&](auto tag) {
    using E = decltype(tag);
    for (int64_t e = 0; e < BH * KV; ++e) dst.data<E>()[e] = E(buf.data()[((e / KV) * buf.slots + slot) * KV + e % KV]);
  });
}

}  // namespace hyb
