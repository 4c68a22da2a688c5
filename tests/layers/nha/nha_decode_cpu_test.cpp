// The nha decode step on the CPU (nha_decode.h, nha.md 9) against the parallel op: token by token and
// several tokens per call, from random initial memories, in every window regime the mixer uses
// (token shift, none, slots only, unlimited window with and without shift, no slots), with GQA, the
// window bias, RoPE off with an odd head dim, the swish slot feature map; the split softmaxes of the
// weighted fusion; and the checks on the state.
#include <catch2/catch.hpp>

#include "autograd/ops/unary.h"
#include "compare.h"
#include "layers/nha/nha_decode.h"
#include "layers/nha/nha_op.h"
#include "nha_decode_cases.h"

using namespace hyb;

namespace {

// The parallel op on the case's inputs; under slot_silu the slots read silu(q), silu(k), the window q, k.
NhaOutputs parallel(const DecodeCase& c, int64_t window, int64_t shift, bool with_slots, bool with_bias,
                    bool long_ratio) {
  NhaParams p;
  p.scale = 0.5;
  p.window = window;
  p.shift = shift;
  p.rope = c.shape.rope;
  p.long_ratio = long_ratio;
  const bool apart = c.shape.slot_silu;
  const Tensor qs = apart ? silu(Var(c.q)).data() : c.q, ks = apart ? silu(Var(c.k)).data() : c.k;
  return nha_forward_cpu(qs, ks, c.v, with_slots ? c.s : Tensor(), with_slots ? c.g : Tensor(),
                         with_slots ? c.HK0 : Tensor(), with_slots ? c.HV0 : Tensor(), with_bias ? c.bias : Tensor(), p,
                         apart ? c.q : Tensor(), apart ? c.k : Tensor());
}

Tensor rows(const Tensor& x, int64_t t0, int64_t n) { return x.narrow(1, t0, n).contiguous(); }

}  // namespace

TEST_CASE("the nha decode step reproduces the parallel op token by token and several tokens per call",
          "[nha][cpu][decode]") {
  struct Regime {
    const char* name;
    DecodeShape d;
  };
  const Regime regimes[] = {
      {"paper form w = shift = 4, GQA, bias", {.window = 4, .shift = 4, .bias = true}},
      {"w = shift = 5, Hq = Hkv = 3", {.Hq = 3, .Hkv = 3, .window = 5, .shift = 5}},
      {"no token shift, w 3", {.window = 3, .shift = 0}},
      {"window 0, shift 0 (gsa)", {.window = 0, .shift = 0, .rope = false}},
      {"slots only, shift 5 (weighted fusion's long branch)", {.window = 0, .shift = 5}},
      {"unlimited window, slots never written, bias", {.window = -1, .shift = -1, .bias = true}},
      {"unlimited window, no token shift", {.window = -1, .shift = 0}},
      {"no slots, window 4", {.M = 0, .window = 4, .shift = 0, .bias = true}},
      {"no RoPE, odd head dim, G = 4", {.Hq = 4, .Hkv = 1, .D = 5, .window = 6, .shift = 6, .rope = false}},
      {"zero initial memories, window 1", {.window = 1, .shift = 1, .states = false}},
      {"slot feature map swish, w = shift = 3", {.window = 3, .shift = 3, .slot_silu = true}},
      {"slot feature map swish, no token shift", {.window = 4, .shift = 0, .slot_silu = true}},
  };
  for (const Regime& r : regimes) {
    DYNAMIC_SECTION(r.name) {
      const DecodeCase c = random_decode_case(r.d, 11);
      const DecodeShape& d = c.shape;
      const NhaOutputs want = parallel(c, d.window, d.shift, d.M > 0, d.bias, d.M > 0);
      for (const std::vector<int64_t>& calls : {std::vector<int64_t>(size_t(d.T), 1), std::vector<int64_t>{1, 3, 1, 6, 2}}) {
        NhaDecodeState st = c.state(c.ring_rows(d.T));
        int64_t pos = 0;
        for (int64_t n : calls) {
          INFO("positions " << pos << " .. " << pos + n - 1);
          NhaDecodeParams p = c.params(pos);
          p.long_ratio = d.M > 0;
          const NhaDecodeOutputs y =
              nha_decode_step_cpu(rows(c.q, pos, n), rows(c.k, pos, n), rows(c.v, pos, n),
                                  d.M > 0 ? rows(c.s, pos, n) : Tensor(), d.M > 0 ? rows(c.g, pos, n) : Tensor(),
                                  c.bias, d.rope ? &c.table : nullptr, st, p);
          REQUIRE(rel_error(y.o, rows(want.o, pos, n)) < 1e-13);
          if (d.M > 0) REQUIRE(rel_error(y.long_ratio, rows(want.long_ratio, pos, n)) < 1e-13);
          pos += n;
        }
        // After the last token the memories are the op's final ones (nha.md 2.7).
        if (d.M > 0) {
          REQUIRE(rel_error(st.HK, want.HK) < 1e-13);
          REQUIRE(rel_error(st.HV, want.HV) < 1e-13);
        }
      }
    }
  }
}

TEST_CASE("the split nha decode step returns the slot branch and the window branch of the weighted fusion apart",
          "[nha][cpu][decode]") {
  const DecodeCase c = random_decode_case({.T = 9, .window = 3, .shift = 3, .bias = true}, 21);
  const DecodeShape& d = c.shape;
  const Tensor slot_branch = parallel(c, 0, d.shift, true, false, false).o;
  const Tensor window_branch = parallel(c, d.window, 0, false, true, false).o;
  NhaDecodeState st = c.state(c.ring_rows(d.T));
  for (int64_t t = 0; t < d.T; ++t) {
    NhaDecodeParams p = c.params(t);
    p.split = true;
    const NhaDecodeOutputs y = nha_decode_step_cpu(rows(c.q, t, 1), rows(c.k, t, 1), rows(c.v, t, 1), rows(c.s, t, 1),
                                                   rows(c.g, t, 1), c.bias, &c.table, st, p);
    REQUIRE(rel_error(y.o, rows(slot_branch, t, 1)) < 1e-13);
    REQUIRE(rel_error(y.o_window, rows(window_branch, t, 1)) < 1e-13);
  }
}

TEST_CASE("the nha decode step rejects a state that cannot hold its window, naming what is missing", "[nha][cpu][decode]") {
  const DecodeCase c = random_decode_case({.T = 1, .window = 4, .shift = 4}, 31);
  auto error_of = [&](NhaDecodeState st, const NhaDecodeParams& p, const Tensor& s, const Tensor& g) -> std::string {
    try {
      nha_decode_step_cpu(c.q, c.k, c.v, s, g, Tensor(), &c.table, st, p);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const NhaDecodeParams p = c.params(0);
  REQUIRE(error_of(c.state(4), p, c.s, c.g).empty());
  REQUIRE_THAT(error_of(c.state(3), p, c.s, c.g), Catch::Contains("ring holds 3") && Catch::Contains("need 4"));
  NhaDecodeState no_gates = c.state(4);
  no_gates.ring_s = no_gates.ring_g = Tensor();
  REQUIRE_THAT(error_of(no_gates, p, c.s, c.g), Catch::Contains("ring_s"));
  NhaDecodeState no_memory = c.state(4);
  no_memory.HK = Tensor();
  REQUIRE_THAT(error_of(no_memory, p, c.s, c.g), Catch::Contains("HK"));
  NhaDecodeParams full = p;
  full.window = -1;
  full.pos = 4;
  REQUIRE_THAT(error_of(c.state(4), full, c.s, c.g), Catch::Contains("need 5"));
  NhaDecodeParams empty = p;
  empty.window = 0;
  REQUIRE_THAT(error_of(c.state(4), empty, Tensor(), Tensor()), Catch::Contains("no slots"));
  NhaDecodeParams ratio = p;
  ratio.split = ratio.long_ratio = true;
  REQUIRE_THAT(error_of(c.state(4), ratio, c.s, c.g), Catch::Contains("omega_L"));
}
