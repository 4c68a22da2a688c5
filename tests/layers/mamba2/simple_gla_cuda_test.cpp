// simple_gla on CUDA (always chunked, 64 tokens) against the f64 recurrent CPU reference: output,
// final state and every gradient (q, k, v, g, S0) with a random final-state gradient, at T around
// the chunk (1, 63, 64, 65, 130), K and V off the 64-wide tiles, shared q/k groups and not. T = 1 runs
// the decode kernel forward and the chunked kernels backward.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/mamba2/simple_gla_op.h"
#include "layers/op_test_util.h"
#include "parity.h"

using namespace hyb;

namespace {

// q and k (seeds seed, seed + 1), v (seed + 2), g in [-0.7, -0.01] (seed + 3) and with s0 an initial
// state (seed + 4).
std::vector<Tensor> gla_inputs(int64_t B, int64_t T, int64_t Gq, int64_t H, int64_t K, int64_t V, bool s0, uint64_t seed) {
  std::vector<Tensor> in{random_tensor({B, T, Gq, K}, seed, DType::f64, 0.5), random_tensor({B, T, Gq, K}, seed + 1, DType::f64, 0.5),
                         random_tensor({B, T, H, V}, seed + 2), uniform_tensor({B, T, H}, seed + 3, -0.7, -0.01)};
  if (s0) in.push_back(random_tensor({B, H, K, V}, seed + 4, DType::f64, 0.5));
  return in;
}

// o and the final state of q, k, v, g and (with s0) S0, at scale 0.3; keep: the fused path's backward
// reads the forward's chunk states instead of computing them again.
std::vector<Var> gla_outputs(const std::vector<Var>& x, bool s0, bool keep = true) {
  SimpleGlaParams p;
  p.scale = 0.3;
  p.save_chunk_states = keep;
  SimpleGlaVars y = simple_gla(x[0], x[1], x[2], state_dtype(x[3], x[0]), s0 ? state_dtype(x[4], x[0]) : Var(), p);
  return {y.o, y.final_state};
}

}  // namespace

TEST_CASE("simple_gla on cuda matches the recurrent cpu reference, outputs and every gradient", "[simple_gla][gpu]") {
  struct Case {
    int64_t B, T, Gq, H, K, V;
    bool s0;
  };
  for (const Case& c : {Case{2, 37, 2, 2, 16, 24, true}, Case{1, 1, 1, 3, 8, 5, true}, Case{2, 63, 1, 2, 33, 70, false},
                        Case{1, 64, 2, 4, 64, 64, true}, Case{1, 65, 2, 4, 20, 65, true}, Case{2, 130, 1, 3, 128, 40, true},
                        Case{1, 200, 3, 3, 7, 130, false}, Case{2, 1, 2, 4, 130, 200, true},
                        Case{1, 70, 1, 2, 256, 192, true}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " Gq " << c.Gq << " H " << c.H << " K " << c.K << " V " << c.V
                         << (c.s0 ? " S0" : "")) {
      const std::vector<Tensor> in = gla_inputs(c.B, c.T, c.Gq, c.H, c.K, c.V, c.s0, 1);
      ParityOptions opt;
      opt.tol_f32 = 5e-5;  // chunked fp32 against the f64 recurrence over up to 200 steps; dg is a difference of row dots
      auto r = cuda_parity([&](const std::vector<Var>& x) { return gla_outputs(x, c.s0); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("simple_gla bf16 on cuda takes the fused tensor-core kernels and matches the recurrent cpu reference",
          "[simple_gla][gpu]") {
  // Shapes the fused path takes (K, V <= 128, multiples of 8): both tile widths of K and V, one and
  // several heads per q/k group (the group sums of dq, dk), several chunks with a partial last one.
  struct Case {
    int64_t B, T, Gq, H, K, V;
    bool s0, keep = true;
  };
  for (const Case& c : {Case{2, 200, 2, 2, 64, 64, true}, Case{1, 150, 1, 4, 128, 64, true}, Case{2, 129, 2, 4, 64, 128, false},
                        Case{1, 97, 1, 2, 128, 128, true}, Case{1, 64, 4, 4, 32, 16, true}, Case{2, 2, 1, 1, 8, 8, true},
                        Case{2, 200, 2, 4, 64, 64, true, false}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " Gq " << c.Gq << " H " << c.H << " K " << c.K << " V " << c.V
                         << (c.s0 ? " S0" : "") << (c.keep ? "" : ", states computed again in the backward")) {
#if HYBRID_CUDA  // the fused kernels exist only in a CUDA build; the [gpu] tests run only there
      const Tensor probe = Tensor::zeros({c.B, c.T, c.Gq, c.K}, DType::bf16, Device::cuda(0));
      const Tensor vprobe = Tensor::zeros({c.B, c.T, c.H, c.V}, DType::bf16, Device::cuda(0));
      REQUIRE(simple_gla_fused_supported(probe, probe, vprobe, c.T, c.K, c.V, c.H / c.Gq));
#endif
      const std::vector<Tensor> in = gla_inputs(c.B, c.T, c.Gq, c.H, c.K, c.V, c.s0, 11);
      ParityOptions opt;
      opt.f32 = false;  // f32 runs the toolkit sequence, checked by the case above
      auto r = cuda_parity([&](const std::vector<Var>& x) { return gla_outputs(x, c.s0, c.keep); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}
