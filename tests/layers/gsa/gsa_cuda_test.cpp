// gsa on CUDA (chunked, 64 tokens) against the f64 recurrent CPU reference: o, both final memories
// and every gradient (q, k, v, s, g and the initial memories) under random final-memory gradients,
// at T around the chunk (1, 37, 63, 64, 65, 130, 200), GQA and not, K, V and M off any tile, and
// with gates strong enough that a chunk's total decay reaches e^-250, and with chunk decay ranges on
// both sides of the kernels' mid-reference guard (60) in one call; the fused path also with the chunk
// memories kept from the forward (save_chunk_states), and M on both sides of the fused path's two slot
// tiles (32 and 64; the 32-slot tile also under the fallback's strong gates). The GSA mixer decoding on CUDA
// (one-token op calls from the carried memories) equals its parallel forward. s and g given as views off
// 16-byte alignment take the fused path with the same bits.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "layers/gsa/gsa.h"
#include "layers/gsa/gsa_config.h"
#include "layers/gsa/gsa_op.h"
#include "layers/mixer_test_util.h"
#include "layers/op_test_util.h"
#include "layers/registry.h"
#include "parity.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

json resolved(const json& written, int64_t d_model) {
  return resolve_test_mixer("gsa", written, {.d_model = d_model, .max_seq_len = 128});
}

MixerContext mixer_context(int64_t d_model) {
  return test_mixer_context({.d_model = d_model, .max_seq_len = 128}, "family", true);
}

// A parity case: B, T, heads, head dims, M slots, initial memories or not, the gate floor.
struct GsaCase {
  int64_t B, T, Hq, Hkv, K, V, M;
  bool states;
  double glo;  // gates uniform in [glo, -0.01]; a chunk's decay range is about 32 |glo|, the fused guard 60
  bool keep = false;  // the fused path's backward reads the forward's chunk memories (save_chunk_states)
};

// q, k, v, the slot weights s and the gates g (seeds seed .. seed + 4), with states the initial memories
// (seed + 5, seed + 6).
std::vector<Tensor> gsa_inputs(const GsaCase& c, uint64_t seed) {
  std::vector<Tensor> in{random_tensor({c.B, c.T, c.Hq, c.K}, seed, DType::f64, 0.5),
                         random_tensor({c.B, c.T, c.Hkv, c.K}, seed + 1, DType::f64, 0.5),
                         random_tensor({c.B, c.T, c.Hkv, c.V}, seed + 2),
                         uniform_tensor({c.B, c.T, c.Hkv, c.M}, seed + 3, 0.0, 1.0),
                         uniform_tensor({c.B, c.T, c.Hkv, c.M}, seed + 4, c.glo, -0.01)};
  if (c.states) {
    in.push_back(random_tensor({c.B, c.Hkv, c.K, c.M}, seed + 5, DType::f64, 0.5));
    in.push_back(random_tensor({c.B, c.Hkv, c.M, c.V}, seed + 6, DType::f64, 0.5));
  }
  return in;
}

// o and both final memories of gsa_inputs' tensors through the tape, at scale 0.4.
std::vector<Var> gsa_outputs(const std::vector<Var>& x, bool states, bool keep = false) {
  GsaParams p;
  p.scale = 0.4;
  p.save_chunk_states = keep;
  GsaVars y = gsa(x[0], x[1], x[2], state_dtype(x[3], x[0]), state_dtype(x[4], x[0]),
                  states ? state_dtype(x[5], x[0]) : Var(), states ? state_dtype(x[6], x[0]) : Var(), p);
  return {y.o, y.Hk, y.Hv};
}

}  // namespace

TEST_CASE("gsa on cuda matches the recurrent cpu reference, outputs and every gradient", "[gsa][gpu]") {
  for (const GsaCase& c : {GsaCase{2, 37, 4, 2, 16, 16, 8, false, -0.9}, GsaCase{1, 1, 2, 1, 8, 8, 4, true, -0.9},
                        GsaCase{1, 63, 2, 2, 33, 20, 5, true, -0.9}, GsaCase{2, 64, 3, 1, 20, 33, 16, true, -0.7},
                        GsaCase{1, 65, 2, 2, 64, 64, 64, true, -0.9}, GsaCase{1, 130, 4, 2, 24, 40, 32, true, -4.0},
                        GsaCase{1, 200, 2, 1, 16, 24, 7, false, -0.5}, GsaCase{2, 200, 4, 2, 64, 64, 64, true, -1.6}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv << " K " << c.K << " V " << c.V
                         << " M " << c.M << (c.states ? " states" : "") << " g >= " << c.glo) {
      const std::vector<Tensor> in = gsa_inputs(c, 1);
      ParityOptions opt;
      opt.tol_f32 = 5e-5;  // chunked fp32 against the f64 recurrence over up to 200 steps; dg sums differences
      auto r = cuda_parity([&](const std::vector<Var>& x) { return gsa_outputs(x, c.states); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("gsa fused bf16 path matches the recurrent cpu reference, outputs and every gradient", "[gsa][gpu]") {
  for (const GsaCase& c : {GsaCase{2, 37, 4, 2, 16, 16, 8, false, -0.9}, GsaCase{1, 1, 2, 2, 8, 8, 4, true, -0.9},
                        GsaCase{1, 130, 2, 1, 64, 64, 64, true, -0.9}, GsaCase{1, 150, 2, 2, 128, 128, 64, true, -1.6},
                        GsaCase{1, 200, 4, 2, 32, 48, 40, true, -10.0}, GsaCase{2, 65, 3, 1, 72, 24, 5, false, -0.5},
                        GsaCase{1, 129, 2, 2, 64, 120, 33, true, -3.0},
                        GsaCase{1, 130, 2, 2, 64, 64, 32, true, -10.0}, GsaCase{1, 140, 2, 1, 128, 72, 17, true, -1.6},
                        GsaCase{2, 150, 4, 2, 64, 64, 48, true, -0.9, true},
                        GsaCase{2, 100, 2, 2, 64, 64, 32, true, -0.9, true},
                        GsaCase{1, 130, 2, 1, 128, 64, 64, false, -3.0, true}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv << " K " << c.K << " V " << c.V
                         << " M " << c.M << (c.states ? " states" : "") << " g >= " << c.glo
                         << (c.keep ? ", chunk memories kept from the forward" : "")) {
      const std::vector<Tensor> in = gsa_inputs(c, 11);
      ParityOptions opt;
      opt.f32 = false;  // f32 runs the generic kernels, covered above
      auto r = cuda_parity([&](const std::vector<Var>& x) { return gsa_outputs(x, c.states, c.keep); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("gsa fused bf16 path: s and g as views 4 bytes off 16-byte alignment give the same bits", "[gsa][gpu]") {
  // The fused kernels copy the gate rows in 16-byte pieces (copy_gates_async), so the host aligns s and g
  // first; M = 32 and M = 64 take the two slot tiles.
  for (int64_t M : {32, 64}) {
    DYNAMIC_SECTION("M " << M) {
      const GsaCase c{2, 130, 2, 2, 64, 64, M, false, -0.9};
      const std::vector<Tensor> in = gsa_inputs(c, 21);
      const Device dev = Device::cuda(0);
      const Tensor q = in[0].to(DType::bf16).to(dev), k = in[1].to(DType::bf16).to(dev);
      const Tensor v = in[2].to(DType::bf16).to(dev), s = in[3].to(DType::f32).to(dev), g = in[4].to(DType::f32).to(dev);
      auto off = [&](const Tensor& t) {  // the same values at one float past an aligned allocation
        const Tensor buf = Tensor::empty({t.numel() + 1}, DType::f32, dev);
        const Tensor x = buf.narrow(0, 1, t.numel()).view(t.shape());
        x.copy_(t);
        return x;
      };
      const Tensor s1 = off(s), g1 = off(g);
      REQUIRE(reinterpret_cast<uintptr_t>(s1.raw_data()) % 16 != 0);
      GsaParams p;
      p.scale = 0.4;
      GsaSaved sa, sb;
      const GsaOutputs ya = gsa_forward(q, k, v, s, g, Tensor(), Tensor(), p, &sa);
      const GsaOutputs yb = gsa_forward(q, k, v, s1, g1, Tensor(), Tensor(), p, &sb);
      CHECK(rel_error(yb.o, ya.o) == 0.0);
      CHECK(rel_error(yb.Hk, ya.Hk) == 0.0);
      const Tensor dout = random_tensor({c.B, c.T, c.Hq, c.V}, 29, DType::f64, 0.5).to(DType::bf16).to(dev);
      const GsaGrads ga = gsa_backward(sa, dout, Tensor(), Tensor(), GradMask{31});
      const GsaGrads gb = gsa_backward(sb, dout, Tensor(), Tensor(), GradMask{31});
      CHECK(rel_error(gb.dq, ga.dq) == 0.0);
      CHECK(rel_error(gb.dk, ga.dk) == 0.0);
      CHECK(rel_error(gb.dv, ga.dv) == 0.0);
      CHECK(rel_error(gb.ds, ga.ds) == 0.0);
      CHECK(rel_error(gb.dg, ga.dg) == 0.0);
    }
  }
}

TEST_CASE("GSA on cuda: decoding token by token and from prefills equals the parallel forward", "[gsa][gpu][decode]") {
  ParameterScope f32(Device::cuda(0), DType::f32);
  GsaMixer layer(gsa_config_from_json(resolved({{"num_heads", 4}, {"num_kv_heads", 2}, {"num_slots", 5}}, 16)),
                 mixer_context(16));
  layer.initialize(7);
  randomize_parameters(layer, 8, 0.3);
  // T 70: past one chunk, so the prefill's final memory comes from a chunk scan.
  require_mixer_decode_matches_forward(
      layer, {.device = Device::cuda(0), .dtype = DType::f32, .d_model = 16, .T = 70, .prefills = {0, 1, 66}, .tol = 1e-4});
}

