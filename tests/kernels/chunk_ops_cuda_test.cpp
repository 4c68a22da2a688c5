// Every primitive of the chunk toolkit (kernels/chunk_ops.h) on CUDA against its CPU twin, on one
// chained computation with random inputs: T = 70 (a full and a padded chunk), heads shared through
// hdiv, transposed and token-scaled views, a bf16 operand, z aliasing out with exp(zlog), single-chunk
// launches, the state scans and both delta-rule scans, the row reductions and the token writers. A failure names the primitive, so
// a wrong op-level result can be traced to one kernel.
#include <catch2/catch.hpp>

#include <map>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "kernels/chunk_ops.h"

using namespace hyb;

TEST_CASE("each chunk toolkit primitive on cuda equals its cpu twin", "[chunk_ops][gpu]") {
  const int64_t B = 2, T = 70, H = 4, Hq = 2, K = 40, V = 70;
  const Tensor q = random_tensor({B, T, Hq, K}, 1, DType::f32, 0.15), v = random_tensor({B, T, H, V}, 2, DType::f32);
  const Tensor S0 = random_tensor({B, H, K, V}, 3, DType::f32, 0.5);
  Tensor g = Tensor::empty({B, T, H}, DType::f32), beta = Tensor::empty({B, T, H}, DType::f32);
  fill_uniform(g, 4, "test.g", -0.06, -0.002);  // weak decays: exp(Glast) ~ 0.2 keeps the scans visible
  fill_uniform(beta, 5, "test.beta", 0.05, 0.95);

  auto run = [&](Device dev) {
    std::map<std::string, Tensor> out;
    const Tensor qd = q.to(dev), vd = v.to(dev), vb = v.to(DType::bf16).to(dev), gd = g.to(dev), bd = beta.to(dev);
    const ChunkDims d = chunk_dims(B, T, H, dev);
    const ChunkView qv = token_view(qd, H / Hq), vv = token_view(vd, 1), vbv = token_view(vb, 1);
    const ChunkGates gt = chunk_gates(gd, bd, d);
    out["gates G"] = gt.G.t, out["gates gam"] = gt.gam.t, out["gates kd"] = gt.kd.t, out["gates beta"] = gt.beta.t;
    out["gates bg"] = gt.bg.t, out["gates Glast"] = gt.Glast;

    ChunkBuffer A(d, d.NC, kScanChunk, kScanChunk), L(d, d.NC, kScanChunk, kScanChunk);
    chunk_gemm(A.view(0, 1), scale_by(qv, gt.gam), qv.t(), nullptr, Tensor(), 0.7f, d);
    out["gemm scaled q q^T"] = A.t.clone();
    chunk_mask(L, &gt, nullptr, false, d, &A);
    out["mask decay, out of place"] = L.t;
    chunk_mask(A, &gt, &gt.beta, true, d);
    out["mask decay beta strict"] = A.t.clone();
    ChunkBuffer Ainv(d, d.NC, kScanChunk, kScanChunk);
    chunk_unit_lower_inverse(Ainv, A, d);
    out["unit lower inverse"] = Ainv.t;

    ChunkBuffer X(d, d.NC, kScanChunk, V);
    const ChunkView xv = X.view(0, 1);
    chunk_gemm(xv, Ainv.view(0, 1), vbv, nullptr, Tensor(), 1.f, d);
    out["gemm with a bf16 operand"] = X.t.clone();
    chunk_gemm(xv, A.view(0, 1).t(), scale_by(vv, gt.kd), &xv, gt.Glast, -1.f, d);
    out["gemm transposed, z = out, zlog"] = X.t.clone();

    ChunkBuffer S(d, d.NC + 1, K, V), R(d, d.NC + 1, K, V);
    chunk_slot_load(S, 0, S0.to(dev));
    chunk_gemm(S.view(1), scale_by(qv.t(), gt.kd), xv, nullptr, Tensor(), 1.f, d);
    chunk_gemm(R.view(0), scale_by(qv.t(), gt.gam), xv, nullptr, Tensor(), 0.5f, d);
    chunk_slot_load(R, d.NC, Tensor());
    out["gemm into state slots"] = S.t.clone();
    chunk_state_scan(S, gt.Glast, false, d);
    chunk_state_scan(R, gt.Glast, true, d);
    out["state scan forward"] = S.t, out["state scan reverse"] = R.t;

    ChunkBuffer Y(d, d.NC, kScanChunk, K);
    const ChunkView yv = Y.view(0, 1);
    chunk_gemm(yv, xv, S.view(0).t(), nullptr, Tensor(), 1.f, d);
    chunk_gemm(yv, xv, S.view(1).t(), &yv, gt.Glast, 0.5f, d.at(d.NC - 1));
    out["gemm on one chunk"] = Y.t;
    chunk_axpy(xv, scale_by(vv, gt.bg), gt.Glast, d.at(0));
    chunk_axpy(R.view(0), R.view(1), Tensor(), d);
    out["axpy, token scale, one chunk"] = X.t.clone(), out["axpy on states"] = R.t;

    ChunkVec vec(d);
    chunk_rowdot(vec, yv, qv, 1.5f, d);
    chunk_rowdot(vec, A.view(0, 1).t(), L.view(0, 1).t(), -1.f, d);
    chunk_inner_last(vec, S.view(1), R.view(0), d);
    out["rowdot and inner_last"] = vec.t;
    Tensor cum = Tensor::empty({B, T, H}, DType::f32, dev), plain = Tensor::empty({B, T, H}, DType::f32, dev);
    chunk_vec_to_tokens(cum, vec, true, d);
    chunk_vec_to_tokens(plain, vec, false, d);
    out["vec to tokens, reverse cumsum"] = cum, out["vec to tokens"] = plain;

    // bf16 out on cuda; the CPU twins write f32 or f64, so the reference is the f32 sum.
    Tensor grouped = Tensor::empty({B, T, Hq, K}, dev.is_cuda() ? DType::bf16 : DType::f32, dev), scaled = Tensor::empty({B, T, H, V}, DType::f32, dev);
    chunk_to_tokens(grouped, Y, H / Hq, nullptr, 1.f, d);
    chunk_to_tokens(scaled, X, 1, &gt.beta, 0.3f, d);
    out["to tokens, head groups, bf16"] = grouped, out["to tokens, row scale"] = scaled;
    // The delta-rule scan both ways (F3 with A = -W, Bm = (kd .* K)^T; stage 1 with A = kd .* K,
    // Bm = -W^T), on copies of X as T and of S / R as the states.
    ChunkBuffer Tf(d, d.NC, kScanChunk, V), Tr(d, d.NC, kScanChunk, V), Sf(d, d.NC + 1, K, V), Sr(d, d.NC + 1, K, V);
    Tf.t.copy_(X.t), Tr.t.copy_(X.t), Sf.t.copy_(S.t), Sr.t.copy_(R.t);
    ChunkBuffer Wq(d, d.NC, kScanChunk, K);
    chunk_gemm(Wq.view(0, 1), Ainv.view(0, 1), scale_by(qv, gt.bg), nullptr, Tensor(), 1.f, d);
    chunk_delta_scan(Sf, Tf, Wq.view(0, 1), -1.f, scale_by(qv.t(), gt.kd), 1.f, gt.Glast, false, d);
    chunk_delta_scan(Sr, Tr, scale_by(qv, gt.kd), 1.f, Wq.view(0, 1).t(), -1.f, gt.Glast, true, d);
    out["delta scan forward, T"] = Tf.t, out["delta scan forward, states"] = Sf.t;
    out["delta scan reverse, T"] = Tr.t, out["delta scan reverse, states"] = Sr.t;
    Tensor last = Tensor::empty({B, H, K, V}, DType::f32, dev);
    chunk_slot_store(last, S, d.NC);
    out["slot store"] = last;
    for (auto& [name, t] : out) t = t.to(Device::cpu()).to(DType::f64);
    return out;
  };
  const auto ref = run(Device::cpu());
  const auto got = run(Device::cuda(0));
  for (const auto& [name, want] : ref) {
    INFO(name);
    const double e = rel_error(got.at(name), want);
    INFO("relative error " << e);
    // bf16 output: one rounding of the result; everything else fp32 against the CPU's double sums.
    CHECK(e < (name == "to tokens, head groups, bf16" ? 4e-3 : 1e-5));
  }
}
