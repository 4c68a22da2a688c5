// nha on CUDA against the f64 recurrent CPU reference in every window regime of nha.md 2: o, the
// final memories, omega_L and every gradient (q, k, v, s, g, the initial memories and the window
// bias) under random final-memory gradients; windows 0, small, over several 64-key tiles of the
// online softmax, >= T and unlimited; token shift equal to the window, 0, other values and "never";
// M = 0; T off the 64-token chunk, GQA, and head dims whose tiles exceed the shared memory of a block
// (the per-query kernels); two regimes with the rotated q, k kept from the forward. Then the same over
// several 64-query tiles of the chunk kernels: the paper form and each ablation that goes through them
// (no token shift, no short memory, no long memory),
// windows 0, 1, 32, 64, 100 and >= T, M 16 and 32, B 2, strong gates, the benchmark's head dims. The
// NHA mixer decoding on CUDA (the decode kernel on the slots and a ring of w tokens, after a parallel
// prefill or from the first token) equals its parallel forward in every ablation that changes the op
// calls. The fused bf16 path (window <= 64) on its own cases, with the chunk memories kept or not.
#include <catch2/catch.hpp>

#include <algorithm>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "layers/mixer_test_util.h"
#include "layers/nha/nha.h"
#include "layers/nha/nha_config.h"
#include "layers/nha/nha_op.h"
#include "layers/op_test_util.h"
#include "layers/registry.h"
#include "parity.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

json resolved(const json& written, int64_t d_model) {
  return resolve_test_mixer("nha", written, {.d_model = d_model, .max_seq_len = 128});
}

MixerContext mixer_context(int64_t d_model) {
  return test_mixer_context({.d_model = d_model, .max_seq_len = 128}, "family", true);
}

// q, k (seeds seed, seed + 1), v (seed + 2); with slots (M > 0) s in [0, 1] and g in [glo, -0.01]
// (seed + 3, + 4); with states the initial memories (seed + 5, + 6); with bias a window bias of
// min(window, T) + bias_extra columns (seed + 7; window < 0 is unlimited).
std::vector<Tensor> nha_inputs(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv, int64_t M, int64_t window,
                               bool states, bool bias, int64_t bias_extra, uint64_t seed, double glo) {
  const int64_t W = window < 0 ? T : std::min(window, T);
  std::vector<Tensor> in{random_tensor({B, T, Hq, D}, seed, DType::f64, 0.5), random_tensor({B, T, Hkv, D}, seed + 1, DType::f64, 0.5),
                         random_tensor({B, T, Hkv, Dv}, seed + 2)};
  if (M > 0) {
    in.push_back(uniform_tensor({B, T, Hkv, M}, seed + 3, 0.0, 1.0));
    in.push_back(uniform_tensor({B, T, Hkv, M}, seed + 4, glo, -0.01));
  }
  if (states) {
    in.push_back(random_tensor({B, Hkv, D, M}, seed + 5, DType::f64, 0.5));
    in.push_back(random_tensor({B, Hkv, M, Dv}, seed + 6, DType::f64, 0.5));
  }
  if (bias) in.push_back(random_tensor({Hq, W + bias_extra}, seed + 7, DType::f64, 0.5));
  return in;
}

// The op on the inputs of nha_inputs: o, with slots the final memories, and omega_L where p asks.
std::vector<Var> nha_outputs(const std::vector<Var>& x, const NhaParams& p, bool slots, bool states, bool bias) {
  size_t i = 3;
  Var s, g, HK0, HV0, w_bias;
  if (slots) {
    s = state_dtype(x[i++], x[0]);
    g = state_dtype(x[i++], x[0]);
  }
  if (states) {
    HK0 = state_dtype(x[i++], x[0]);
    HV0 = state_dtype(x[i++], x[0]);
  }
  if (bias) w_bias = x[i++];
  NhaVars y = nha(x[0], x[1], x[2], s, g, HK0, HV0, w_bias, p);
  std::vector<Var> out{y.o};
  if (slots) {
    out.push_back(y.HK);
    out.push_back(y.HV);
  }
  if (p.long_ratio) out.push_back(Var(y.long_ratio));
  return out;
}

}  // namespace

TEST_CASE("nha on cuda matches the recurrent cpu reference in every window regime, outputs and every gradient",
          "[nha][gpu]") {
  struct Regime {
    const char* name;
    int64_t B, T, Hq, Hkv, D, Dv, M, window, shift;
    bool rope, states, bias, ratio;
    bool keep_qk = false;  // the backward reads the forward's rotated q, k (save_window_qk)
  };
  const Regime regimes[] = {
      {"window 0, shift 0 (gsa)", 2, 37, 4, 2, 16, 16, 8, 0, 0, false, true, false, true},
      {"paper form w = shift = 4, GQA", 2, 37, 4, 2, 16, 12, 8, 4, 4, true, true, true, true},
      {"no token shift, w 3", 1, 70, 2, 2, 8, 8, 5, 3, 0, true, true, true, false},
      {"w = shift = 32 over three chunks", 1, 150, 2, 1, 16, 16, 8, 32, 32, true, true, false, true},
      {"window >= T, shift 5", 1, 70, 2, 2, 16, 8, 6, 100, 5, true, false, true, true},
      {"unlimited window, slots never written", 1, 70, 2, 1, 16, 16, 4, -1, -1, true, true, true, true},
      {"slots only, shift 7", 1, 65, 2, 2, 8, 8, 4, 0, 7, false, true, false, false},
      {"no slots (M = 0), window 8", 2, 50, 4, 2, 16, 16, 0, 8, 0, true, false, true, false},
      {"window 200 over two key tiles, shift 200", 1, 300, 2, 1, 8, 8, 4, 200, 200, true, false, true, false},
      {"paper form w = shift = 4, GQA, rotated q, k kept", 2, 37, 4, 2, 16, 12, 8, 4, 4, true, true, true, true, true},
      {"window 200, shift 200, rotated q, k kept", 1, 300, 2, 1, 8, 8, 4, 200, 200, true, false, true, false, true},
      {"window 150, shift 20, no rope", 1, 300, 2, 2, 8, 6, 3, 150, 20, false, true, false, true},
      {"D = Dv = 128, M 64, w = shift = 8: tiles past the shared memory, per-query kernels", 1, 70, 2, 1, 128, 128, 64,
       8, 8, true, true, true, true},
  };
  for (const Regime& c : regimes) {
    DYNAMIC_SECTION(c.name) {
      const std::vector<Tensor> in =
          nha_inputs(c.B, c.T, c.Hq, c.Hkv, c.D, c.Dv, c.M, c.window, c.states, c.bias, 2, 1, -0.9);
      ParityOptions opt;
      opt.tol_f32 = 5e-5;  // chunked fp32 against the f64 recurrence; dg sums differences
      NhaParams p;
      p.window = c.window;
      p.shift = c.shift;
      p.rope = c.rope;
      p.scale = 0.5;
      p.long_ratio = c.ratio;
      p.save_window_qk = c.keep_qk;
      auto r = cuda_parity([&](const std::vector<Var>& x) { return nha_outputs(x, p, c.M > 0, c.states, c.bias); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("nha on cuda matches the cpu reference over several query tiles of the chunk kernels, outputs and every "
          "gradient",
          "[nha][gpu]") {
  // Query tiles start at chunk boundaries + shift, the window's key tiles at t0 - w + 1: shifts and
  // windows off the 64-token tile put both out of step with the chunks and with each other.
  struct Case {
    const char* name;
    int64_t B, T, Hq, Hkv, D, Dv, M, window, shift;
    bool states, bias, ratio;
    double glo;  // gates uniform in [glo, -0.01]
  };
  const Case cases[] = {
      {"paper form w = shift = 32, M 32, T 150", 2, 150, 2, 2, 32, 32, 32, 32, 32, true, false, true, -0.9},
      {"w = shift = 1, M 16, GQA, bias", 2, 130, 4, 2, 16, 24, 16, 1, 1, false, true, false, -0.9},
      {"w/o short memory (w 0, shift 0), M 16, T 150", 2, 150, 2, 1, 16, 16, 16, 0, 0, true, false, true, -0.9},
      {"w/o short memory with a shift (w 0, shift 40), M 32", 2, 150, 2, 2, 16, 16, 32, 0, 40, false, false, true, -0.9},
      {"w = shift = 100, M 32, T 201, bias", 2, 201, 2, 2, 16, 16, 32, 100, 100, true, true, true, -0.9},
      {"w = shift = 64, M 16, T 130", 2, 130, 2, 1, 16, 16, 16, 64, 64, true, false, false, -0.9},
      {"w/o token shift, w 32, M 32", 2, 150, 2, 2, 16, 16, 32, 32, 0, true, false, false, -0.9},
      {"w/o token shift, w 100, M 16, GQA", 2, 170, 4, 2, 16, 16, 16, 100, 0, false, true, true, -0.9},
      {"w >= T (200 > 150), M 16: slots never written", 2, 150, 2, 1, 16, 16, 16, 200, 200, true, true, true, -0.9},
      {"unlimited window and shift, M 32", 2, 190, 2, 2, 16, 16, 32, -1, -1, true, false, true, -0.9},
      {"w/o long memory (M 0), w 32", 2, 150, 4, 2, 16, 16, 0, 32, 0, false, true, false, -0.9},
      {"w/o long memory (M 0), w 100", 2, 201, 2, 1, 16, 16, 0, 100, 0, false, false, false, -0.9},
      {"w/o long memory (M 0), w >= T", 2, 100, 2, 2, 16, 16, 0, -1, 0, false, true, false, -0.9},
      {"w = shift = 32, strong gates (decay ranges past the mid-reference guard)", 2, 150, 2, 2, 16, 16, 16, 32, 32,
       true, false, false, -4.0},
      {"w = shift = 32, D = Dv = 64, M 32 (the benchmark head)", 2, 140, 2, 2, 64, 64, 32, 32, 32, false, false, true,
       -0.9},
      {"w 70, shift 3: a short first tile of the initial memory", 1, 200, 2, 2, 16, 16, 16, 70, 3, true, false, true,
       -0.9},
      {"T 37 < w = shift = 50, M 16", 2, 37, 2, 2, 16, 16, 16, 50, 50, true, true, true, -0.9},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name << ": B " << c.B << " T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv << " D " << c.D
                           << " Dv " << c.Dv << " M " << c.M << " w " << c.window << " shift " << c.shift) {
      const std::vector<Tensor> in =
          nha_inputs(c.B, c.T, c.Hq, c.Hkv, c.D, c.Dv, c.M, c.window, c.states, c.bias, 3, 11, c.glo);
      ParityOptions opt;
      opt.tol_f32 = 5e-5;  // chunked fp32 against the f64 recurrence; dg sums differences
      NhaParams p;
      p.window = c.window;
      p.shift = c.shift;
      p.long_ratio = c.ratio;
      auto r = cuda_parity([&](const std::vector<Var>& x) { return nha_outputs(x, p, c.M > 0, c.states, c.bias); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("nha fused bf16 path (window <= 64) matches the recurrent cpu reference, outputs and every gradient",
          "[nha][gpu]") {
  // bf16 without omega_L and 1 <= window <= 64 takes layers/nha/nha_fused.h (the slot side of the
  // backward on gsa's fused kernels; the window side on slot attention's with a bias or D, Dv > 64, else
  // B3's dq and nha_window_kv_kernel's dk, dv): T below the window and off the chunk, GQA, strong gates
  // past the mid-reference guard, shift apart from the window, head dims up to 128, windows 1, 17, 32, 64
  // without a bias; RoPE from position 0 and further on; the chunk memories (save_chunk_states) and the
  // rotated window q, k (save_window_qk) kept from the forward for the backward.
  struct Case {
    int64_t B, T, Hq, Hkv, D, Dv, M, window, shift;
    bool rope, states, bias;
    double glo;  // gates uniform in [glo, -0.01]
    bool keep_states = false, keep_qk = false;
    int64_t rope_offset = 0;
  };
  for (const Case& c : {Case{2, 20, 4, 2, 16, 16, 8, 32, 32, true, true, true, -0.9},
                        Case{2, 150, 4, 2, 64, 64, 32, 32, 32, true, true, false, -0.9},
                        Case{1, 150, 2, 2, 64, 64, 64, 64, 64, true, true, true, -10.0},
                        Case{1, 100, 2, 1, 24, 40, 16, 17, 5, true, false, true, -4.0},
                        Case{1, 70, 2, 2, 32, 32, 8, 1, 0, false, true, true, -0.3},
                        Case{1, 129, 2, 1, 128, 64, 64, 32, 32, true, true, true, -0.9},
                        Case{1, 64, 2, 2, 16, 16, 5, 64, 100, true, true, false, -0.9},
                        Case{2, 20, 4, 2, 16, 16, 8, 32, 32, true, true, false, -0.9},
                        Case{1, 100, 2, 1, 24, 40, 16, 17, 5, true, false, false, -4.0},
                        Case{2, 70, 2, 1, 32, 64, 8, 1, 0, false, true, false, -0.3},
                        Case{2, 150, 4, 2, 64, 64, 32, 32, 32, true, true, false, -0.9, true, true, 37},
                        Case{1, 150, 2, 2, 64, 64, 64, 64, 64, true, false, false, -10.0, true, false},
                        Case{1, 100, 2, 1, 24, 40, 16, 17, 5, true, true, true, -4.0, false, true, 1000}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv << " D " << c.D << " Dv " << c.Dv
                         << " M " << c.M << " w " << c.window << " shift " << c.shift << " g >= " << c.glo
                         << (c.keep_states ? " kept states" : "") << (c.keep_qk ? " kept q~ k~" : "")
                         << " rope offset " << c.rope_offset) {
      const std::vector<Tensor> in =
          nha_inputs(c.B, c.T, c.Hq, c.Hkv, c.D, c.Dv, c.M, c.window, c.states, c.bias, 2, 31, c.glo);
      ParityOptions opt;
      opt.f32 = false;  // f32 runs the slot-attention kernels, covered above
      NhaParams p;
      p.window = c.window;
      p.shift = c.shift;
      p.rope = c.rope;
      p.rope_offset = c.rope_offset;
      p.save_chunk_states = c.keep_states;
      p.save_window_qk = c.keep_qk;
      p.scale = 0.4;
      auto r = cuda_parity([&](const std::vector<Var>& x) { return nha_outputs(x, p, true, c.states, c.bias); }, in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("NHA on cuda: decoding token by token and from prefills equals the parallel forward", "[nha][gpu][decode]") {
  const std::vector<std::pair<std::string, json>> variants = {
      {"default (rope_short, token shift)", json::object()},
      {"w/o long memory (slots 0)", {{"slots", 0}}},
      {"w/o short memory (window 0)", {{"window", 0}}},
      {"w/o token shift", {{"token_shift", false}}},
      {"full window", {{"window", -1}}},
      {"full window without token shift", {{"window", -1}, {"token_shift", false}}},
      {"window excludes current", {{"window_includes_current", false}}},
      {"weighted_fixed", {{"fusion", "weighted_fixed"}, {"fusion_weight", 0.3}}},
      {"weighted_learned", {{"fusion", "weighted_learned"}}},
      {"rope_short_long", {{"pos_enc", "rope_short_long"}}},
      {"learned_short", {{"pos_enc", "learned_short"}}},
      {"short convs, GQA 4:1", {{"use_short_conv", true}, {"num_kv_heads", 1}}},
      {"slot_feature_map swish", {{"slot_feature_map", "swish"}}},
  };
  for (const auto& [name, variant] : variants) {
    json m = {{"num_heads", 4}, {"num_kv_heads", 2}, {"head_dim", 8}, {"value_head_dim", 4}, {"slots", 3}, {"window", 5}};
    for (const auto& [k, v] : variant.items()) m[k] = v;
    ParameterScope f32(Device::cuda(0), DType::f32);
    NhaMixer layer(nha_config_from_json(resolved(m, 16)), mixer_context(16));
    layer.initialize(7);
    randomize_parameters(layer, 8, 0.3);
    // T 70: past one chunk of the slot memory.
    require_mixer_decode_matches_forward(layer, {.device = Device::cuda(0),
                                                 .dtype = DType::f32,
                                                 .d_model = 16,
                                                 .T = 70,
                                                 .prefills = {0, 1, 66},
                                                 .tol = 1e-4,
                                                 .name = name + " "});
  }
}
