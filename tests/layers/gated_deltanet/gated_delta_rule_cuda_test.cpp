// The gated delta rule on CUDA (always chunked, WY/UT, 64 tokens) against the f64 recurrent CPU
// reference: output, final state and every gradient (q, k, v, beta, g, S0) with a random final-state
// gradient, for T not a multiple of the chunk, HV = H and HV = 2H, K and V off the 64-wide tiles and at
// 256 (the largest state tile chunk_delta_scan keeps in shared memory), and
// a run with beta = 0 on a stretch of tokens (NAtS-L's softmax-routed chunks). T = 1 runs the decode
// kernel forward and the chunked kernels backward. bf16 with K <= 128 takes the fused tensor-core path:
// its own case covers every compiled tile configuration (gated_deltanet.md 4.8 item 2, 6.9).
#include <catch2/catch.hpp>

#include <tuple>

#include "autograd/gradcheck.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"
#include "layers/norm/l2norm_op.h"
#include "layers/op_test_util.h"
#include "compare.h"
#include "parity.h"
#include "scoped_env.h"

using namespace hyb;

namespace {

// q and k unit vectors per head (seeds seed, seed + 1), v (seed + 2), beta in [0.05, beta_hi] (seed + 3;
// 0 on tokens 40..109 with zero_beta), g in [glo, ghi] (seed + 4) and with s0 an initial state (seed + 5).
std::vector<Tensor> delta_inputs(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V, bool s0, bool zero_beta,
                                 uint64_t seed, double glo, double ghi, double beta_hi = 0.95) {
  auto unit = [&](uint64_t s) { return l2norm_forward(random_tensor({B, T, H, K}, s), 1e-12, L2NormEps::clamp, nullptr); };
  Tensor beta = uniform_tensor({B, T, HV}, seed + 3, 0.05, beta_hi);
  if (zero_beta) beta.narrow(1, 40, 70).copy_(Tensor::zeros({B, 70, HV}, DType::f64));
  std::vector<Tensor> in{unit(seed), unit(seed + 1), random_tensor({B, T, HV, V}, seed + 2), beta,
                         uniform_tensor({B, T, HV}, seed + 4, glo, ghi)};
  if (s0) in.push_back(random_tensor({B, HV, K, V}, seed + 5, DType::f64, 0.5));
  return in;
}

// o and the final state of q, k, v, beta, g and (with s0) S0.
std::vector<Var> delta_outputs(const std::vector<Var>& x, bool s0) {
  GatedDeltaVars y = gated_delta_rule(x[0], x[1], x[2], state_dtype(x[3], x[0]), state_dtype(x[4], x[0]),
                                      s0 ? state_dtype(x[5], x[0]) : Var(), GatedDeltaParams{});
  return {y.o, y.final_state};
}

}  // namespace

TEST_CASE("gated_delta_rule on cuda matches the recurrent cpu reference, outputs and every gradient",
          "[gated_delta_rule][gpu]") {
  struct Case {
    int64_t B, T, H, HV, K, V;
    bool s0, zero_beta;
  };
  for (const Case& c : {Case{2, 37, 2, 2, 16, 16, false, false}, Case{1, 1, 1, 2, 8, 5, true, false},
                        Case{1, 63, 2, 4, 32, 24, true, false}, Case{1, 64, 1, 1, 64, 64, true, false},
                        Case{2, 65, 2, 2, 20, 70, true, false}, Case{1, 130, 2, 4, 32, 32, true, false},
                        Case{1, 133, 1, 2, 128, 40, false, false}, Case{1, 150, 2, 2, 16, 16, true, true},
                        Case{2, 1, 2, 4, 130, 200, true, false}, Case{2, 1, 1, 1, 16, 8, false, false},
                        Case{1, 70, 1, 2, 256, 256, true, false}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " H " << c.H << " HV " << c.HV << " K " << c.K << " V " << c.V
                         << (c.s0 ? " S0" : "") << (c.zero_beta ? " beta 0 on tokens 40..109" : "")) {
      const std::vector<Tensor> in = delta_inputs(c.B, c.T, c.H, c.HV, c.K, c.V, c.s0, c.zero_beta, 1, -0.6, -0.02);
      ParityOptions opt;
      opt.tol_f32 = 5e-5;  // chunked fp32 with an fp32 triangular solve against the f64 recurrence
      auto r = cuda_parity([&](const std::vector<Var>& x) { return delta_outputs(x, c.s0); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("gated_delta_rule bf16 on cuda takes the fused tensor-core kernels and matches the recurrent cpu reference",
          "[gated_delta_rule][gpu]") {
  // Every tile configuration the fused path compiles: K padded to 64 or 128, and scan column tiles of
  // 16, 32, 64 and 128 (scan_plan's choice against the 132 SMs of an H100 or H200: 66 heads at B = 1, 2,
  // 3 take 16, 32 and 64 columns at K <= 64, 66, 33 and 48 heads at K = 128 take 32, 64 and 128). Also T below,
  // at and around the chunk, a partial V tile (40), shared q/k heads (HV = 2H), an initial state,
  // beta = 0 on a stretch, beta up to 2 (allow_neg_eigval), and weak decays (g near 0), under which
  // the blocks of the triangular solve far from the diagonal matter as much as the near ones.
  struct Case {
    int64_t B, T, H, HV, K, V;
    bool s0, weak_decay, zero_beta;
    double beta_hi = 0.95;
  };
  for (const Case& c : {Case{2, 200, 2, 2, 64, 64, true, true, false}, Case{1, 70, 1, 1, 128, 256, true, true, false},
                        Case{2, 37, 2, 4, 16, 16, false, false, false}, Case{1, 130, 2, 2, 32, 40, true, false, true},
                        Case{1, 63, 1, 2, 128, 40, true, true, false}, Case{1, 65, 66, 66, 32, 64, true, true, false},
                        Case{2, 65, 66, 66, 24, 64, false, true, false}, Case{3, 65, 66, 66, 32, 64, true, true, false},
                        Case{1, 70, 33, 66, 128, 40, true, true, false},
                        Case{1, 70, 33, 33, 128, 256, true, true, false},
                        Case{1, 130, 48, 48, 128, 256, true, false, false}, Case{3, 1, 1, 1, 8, 8, true, false, false},
                        Case{1, 2, 2, 2, 64, 64, true, true, false}, Case{2, 130, 2, 4, 16, 16, true, true, false, 1.95}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " H " << c.H << " HV " << c.HV << " K " << c.K << " V " << c.V
                         << (c.s0 ? " S0" : "") << (c.weak_decay ? " g in [-0.05, -0.001]" : " g in [-0.6, -0.02]")
                         << (c.zero_beta ? " beta 0 on tokens 40..109" : "") << " beta up to " << c.beta_hi) {
#if HYBRID_CUDA  // the fused kernels exist only in a CUDA build; the [gpu] tests run only there
      const Tensor probe = Tensor::zeros({c.B, c.T, c.H, c.K}, DType::bf16, Device::cuda(0));
      REQUIRE(gated_delta_rule_fused_supported(probe, GatedDeltaDims{c.B, c.T, c.H, c.HV, c.K, c.V, c.HV / c.H}));
#endif
      const double glo = c.weak_decay ? -0.05 : -0.6, ghi = c.weak_decay ? -0.001 : -0.02;
      const std::vector<Tensor> in =
          delta_inputs(c.B, c.T, c.H, c.HV, c.K, c.V, c.s0, c.zero_beta, 21, glo, ghi, c.beta_hi);
      ParityOptions opt;
      opt.f32 = false;  // f32 runs the toolkit sequence, checked by the case above
      auto r = cuda_parity([&](const std::vector<Var>& x) { return delta_outputs(x, c.s0); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("gated_delta_rule bf16 on cuda with few heads and long sequences runs the segmented scans and matches the "
          "recurrent cpu reference",
          "[gated_delta_rule][gpu]") {
  // Few (b, value head) pairs and many chunks: the scans split the chunks into segments (scan_plan in
  // gated_delta_rule_cuda.cuh). The plans on a 132-SM GPU (forward and reverse scan): K = V = 64 with
  // B HV = 2, 16-column tiles in 11 segments of 6 chunks, the last of 5 ending in a partial chunk (37
  // tokens); 16 heads, 64-column tiles in 9 segments of 8, the last of 1; the NAtS-L head shape (K 128,
  // V 256, 6 heads) 64-column tiles in 5 segments of 13, Phi over two column tiles; HV = 2H,
  // 10 segments of 7; K = 32 with V = 16 and with V = 24 (a partial tile), 5 segments of 5, two Phi
  // tiles. Strong and weak decays: under weak ones the state carries across many segments, so a wrong
  // segment start shows. Pieces off, whatever the default would choose (the next case has them).
  const ScopedEnv no_pieces("HYBRID_GDN_PIECES", "0");
  struct Case {
    int64_t B, T, H, HV, K, V;
    bool s0, weak_decay;
  };
  for (const Case& c : {Case{1, 4096 + 37, 2, 2, 64, 64, true, true}, Case{1, 4096 + 37, 2, 2, 64, 64, false, false},
                        Case{1, 4096 + 37, 16, 16, 64, 64, true, true}, Case{1, 4096 + 37, 6, 6, 128, 256, true, true},
                        Case{1, 64 * 70, 1, 2, 64, 64, true, true},
                        Case{2, 1600, 1, 1, 32, 16, true, true}, Case{1, 1600, 1, 2, 32, 24, false, true}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " H " << c.H << " HV " << c.HV << " K " << c.K << " V " << c.V
                         << (c.s0 ? " S0" : "") << (c.weak_decay ? " g in [-0.05, -0.001]" : " g in [-0.6, -0.02]")) {
#if HYBRID_CUDA
      const Tensor probe = Tensor::zeros({c.B, c.T, c.H, c.K}, DType::bf16, Device::cuda(0));
      REQUIRE(gated_delta_rule_fused_supported(probe, GatedDeltaDims{c.B, c.T, c.H, c.HV, c.K, c.V, c.HV / c.H}));
#endif
      const double glo = c.weak_decay ? -0.05 : -0.6, ghi = c.weak_decay ? -0.001 : -0.02;
      const std::vector<Tensor> in = delta_inputs(c.B, c.T, c.H, c.HV, c.K, c.V, c.s0, false, 31, glo, ghi);
      ParityOptions opt;
      opt.f32 = false;
      auto r = cuda_parity([&](const std::vector<Var>& x) { return delta_outputs(x, c.s0); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

namespace {

// A shape with one of the scan switches (read at every call) set to `value`.
struct SwitchCase {
  int64_t B, T, H, HV, K, V;
  const char* value;
};

// Parity with `var` set as the case says, on weak decays and an initial state, so that a wrong state
// handed between pieces or segments shows far downstream.
void parity_under(const char* var, const SwitchCase& c, uint64_t seed) {
  DYNAMIC_SECTION("B " << c.B << " T " << c.T << " H " << c.H << " HV " << c.HV << " K " << c.K << " V " << c.V
                       << " " << var << "=" << c.value) {
    const ScopedEnv scoped(var, c.value);
    const std::vector<Tensor> in = delta_inputs(c.B, c.T, c.H, c.HV, c.K, c.V, true, false, seed, -0.05, -0.001);
    ParityOptions opt;
    opt.f32 = false;
    auto r = cuda_parity([&](const std::vector<Var>& x) { return delta_outputs(x, true); }, in, opt);
    INFO(r.report);
    REQUIRE(r.ok);
  }
}

}  // namespace

TEST_CASE("gated_delta_rule bf16 on cuda in pieces beside the per-chunk kernels matches the recurrent cpu reference",
          "[gated_delta_rule][gpu]") {
  // run_pieces (gated_delta_rule_cuda.cuh): the scans in pieces on a scan stream, each piece's state
  // handed to the next through memory, prepare and output (forward) and the intra-chunk backward in
  // pieces on the compute stream. Piece lengths that divide the chunks and ones that leave a short last
  // piece, and one chunk a piece (every start handed over).
  for (const SwitchCase& c :
       {SwitchCase{1, 4096 + 37, 2, 2, 64, 64, "9"}, SwitchCase{1, 4096 + 37, 2, 2, 64, 64, "1"},
        SwitchCase{1, 4096 + 37, 2, 2, 64, 64, "7"}, SwitchCase{1, 4096 + 37, 6, 6, 128, 256, "13"},
        SwitchCase{1, 64 * 40, 1, 2, 64, 64, "10"}, SwitchCase{2, 1600, 1, 2, 32, 24, "3"}})
    parity_under("HYBRID_GDN_PIECES", c, 37);
}

TEST_CASE("gated_delta_rule bf16 on cuda with long segments runs their first passes beside the prepare kernel and "
          "matches the recurrent cpu reference",
          "[gated_delta_rule][gpu]") {
  // Segments of kBesideLen chunks or more (run_scan): pass 1 of each segment on its own scan stream once
  // its chunks are prepared, the combine and pass 3 on scan stream 0, the segment scanned first consumed
  // beside them. Forced segment counts: 2 segments of 66 chunks (the last of 65, ending in a partial
  // chunk), and 3 of 64 with K 128, V 256 (NAtS-L's head shape, Phi over two column tiles).
  for (const SwitchCase& c :
       {SwitchCase{1, 64 * 130 + 37, 2, 2, 64, 64, "2"}, SwitchCase{1, 64 * 192, 1, 2, 128, 256, "3"}})
    parity_under("HYBRID_GDN_SEGMENTS", c, 43);
}

TEST_CASE("gated_delta_rule bf16 on cuda: the backward from the forward's kept chunk scratch equals the one that "
          "rebuilds it",
          "[gated_delta_rule][gpu]") {
  // The parity cases above run with the default save_chunk_states; this one pins the rebuild path to
  // the same bits (the same kernels on the same inputs), segmented scans and pieces included (B HV = 2,
  // T 4133).
  struct Case {
    GatedDeltaDims d;
    const char* pieces;
  };
  for (const auto& [d, pieces] : {Case{GatedDeltaDims{2, 200, 2, 4, 64, 64, 2}, nullptr},
                                  Case{GatedDeltaDims{1, 4133, 2, 2, 64, 64, 1}, "0"},
                                  Case{GatedDeltaDims{1, 4133, 2, 2, 64, 64, 1}, "6"}}) {
    DYNAMIC_SECTION("B " << d.B << " T " << d.T << " H " << d.H << " HV " << d.HV << " pieces of "
                         << (pieces ? pieces : "(default)")) {
      const ScopedEnv scoped("HYBRID_GDN_PIECES", pieces);
      const std::vector<Tensor> in = delta_inputs(d.B, d.T, d.H, d.HV, d.K, d.V, true, false, 41, -0.6, -0.02);
      const Device gpu = Device::cuda(0);
      auto bf = [&](const Tensor& t) { return t.to(DType::bf16).to(gpu); };
      auto f32 = [&](const Tensor& t) { return t.to(DType::f32).to(gpu); };
      const Tensor dout = bf(random_tensor({d.B, d.T, d.HV, d.V}, 47));
      const Tensor dfinal = f32(random_tensor({d.B, d.HV, d.K, d.V}, 48));
      GatedDeltaGrads g[2];
      for (int keep = 0; keep < 2; ++keep) {
        GatedDeltaParams p;
        p.chunk_size = 64;
        p.save_chunk_states = keep == 1;
        GatedDeltaSaved s;
        gated_delta_rule_forward(bf(in[0]), bf(in[1]), bf(in[2]), f32(in[3]), f32(in[4]), f32(in[5]), p, &s);
        REQUIRE(s.chunks.W.defined() == (keep == 1));
        g[keep] = gated_delta_rule_backward(s, dout, dfinal, GradMask{63});
      }
      for (auto [what, a, b] : {std::tuple{"dq", g[0].dq, g[1].dq}, std::tuple{"dk", g[0].dk, g[1].dk},
                                std::tuple{"dv", g[0].dv, g[1].dv}, std::tuple{"dbeta", g[0].dbeta, g[1].dbeta},
                                std::tuple{"dg", g[0].dg, g[1].dg}, std::tuple{"dS0", g[0].dS0, g[1].dS0}}) {
        INFO(what);
        CHECK(rel_error(a.to(DType::f64).to(Device::cpu()), b.to(DType::f64).to(Device::cpu())) == 0);
      }
    }
  }
}

TEST_CASE("the golden gated_delta_rule shapes take the fused path in bf16 on cuda", "[gated_delta_rule][gpu]") {
  // The golden test runs gated_delta_rule_5 and _6 on cuda in bf16; this pins that it checks the fused
  // kernels (and not the toolkit fallback) against the golden recurrence.
#if HYBRID_CUDA
  for (const GatedDeltaDims& d : {GatedDeltaDims{2, 37, 2, 2, 16, 16, 1}, GatedDeltaDims{1, 130, 2, 2, 32, 32, 1}}) {
    const Tensor probe = Tensor::zeros({d.B, d.T, d.H, d.K}, DType::bf16, Device::cuda(0));
    CHECK(gated_delta_rule_fused_supported(probe, d));
  }
#endif
}
