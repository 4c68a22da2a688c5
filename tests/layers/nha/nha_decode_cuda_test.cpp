// The nha decode kernel (nha_decode.cu) against the CPU decode step in f64, on random memories and a
// random, wrapped-around ring (the state of a long decode), f32 and bf16 inputs: o, omega_L or the
// split branches, and the state after the call (HK, HV and every ring slot). Regimes: the benchmark
// shape, GQA with M not dividing the block, several tokens per call, no token shift, slots only,
// unlimited windows over several key tiles (a KV cache), a window over two tiles with D = 128 and
// M = 128, no slots, split softmaxes, no RoPE, the window bias and the swish slot feature map.
#include <catch2/catch.hpp>

#include "compare.h"
#include "layers/nha/nha_decode.h"
#include "nha_decode_cases.h"

using namespace hyb;

namespace {

struct Regime {
  const char* name;
  DecodeShape d;  // d.T: tokens of the one call
  int64_t pos;    // position of its first token; the ring holds random tokens before it
  bool split = false;
};

// A state as after `pos` tokens: random memories and every ring slot filled (old positions included).
NhaDecodeState random_state(const DecodeCase& c, int64_t rows, uint64_t seed) {
  NhaDecodeState st = c.state(rows);
  auto fill = [&](Tensor& t, uint64_t k, double sd) {
    if (t.defined()) t = random_tensor(t.shape(), seed + k, DType::f64, sd);
  };
  fill(st.HK, 1, 0.5);
  fill(st.HV, 2, 0.5);
  fill(st.ring_k, 3, 0.7);
  fill(st.ring_v, 4, 1.0);
  fill(st.ring_s, 5, 0.3);
  if (st.ring_g.defined()) {
    fill_uniform(st.ring_g, seed + 6, "test.decode.ring_g", -0.9, -0.01);
  }
  return st;
}

// Each state tensor in the dtype the device keeps it in: ring k, v in the input dtype, the rest f32.
NhaDecodeState cast_state(const NhaDecodeState& st, DType dt, Device dev) {
  auto as = [&](const Tensor& t, DType to) { return t.defined() ? t.to(to).to(dev).contiguous() : Tensor(); };
  return {as(st.HK, DType::f32), as(st.HV, DType::f32), as(st.ring_k, dt), as(st.ring_v, dt),
          as(st.ring_s, DType::f32), as(st.ring_g, DType::f32)};
}

Tensor host64(const Tensor& t) { return t.defined() ? t.to(Device::cpu()).to(DType::f64) : Tensor(); }

}  // namespace

TEST_CASE("the nha decode kernel matches the cpu decode step on a random long-decode state, f32 and bf16",
          "[nha][gpu][decode]") {
  const Regime regimes[] = {
      {"benchmark shape: Hq = Hkv = 16, D = Dv = 64, M = 32, w = shift = 32, one token",
       {.B = 2, .T = 1, .Hq = 16, .Hkv = 16, .D = 64, .Dv = 64, .M = 32, .window = 32, .shift = 32}, 1000},
      {"GQA G = 4, D 32, Dv 48, M 24, w = shift = 7, three tokens, bias",
       {.B = 3, .T = 3, .Hq = 8, .Hkv = 2, .D = 32, .Dv = 48, .M = 24, .window = 7, .shift = 7, .bias = true}, 40},
      {"no token shift (the token absorbs itself), w 5, two tokens",
       {.T = 2, .D = 16, .Dv = 16, .M = 8, .window = 5, .shift = 0}, 23},
      {"slots only, shift 0 (gsa)", {.T = 1, .D = 16, .Dv = 8, .M = 16, .window = 0, .shift = 0, .rope = false}, 9},
      {"unlimited window over three key tiles, slots never written, bias",
       {.T = 2, .Hq = 4, .Hkv = 1, .D = 32, .Dv = 32, .M = 4, .window = -1, .shift = -1, .bias = true}, 150},
      {"unlimited window, no token shift", {.T = 1, .D = 16, .Dv = 16, .M = 8, .window = -1, .shift = 0}, 70},
      {"window 100 over two key tiles, shift 100, D = Dv = 128, M = 128",
       {.B = 1, .T = 1, .Hq = 2, .Hkv = 2, .D = 128, .Dv = 128, .M = 128, .window = 100, .shift = 100}, 333},
      {"no slots, window 9, bias", {.T = 2, .D = 16, .Dv = 16, .M = 0, .window = 9, .shift = 0, .bias = true}, 30},
      {"split softmaxes (weighted fusion), w = shift = 6, G = 2",
       {.T = 2, .Hq = 4, .Hkv = 2, .D = 16, .Dv = 16, .M = 8, .window = 6, .shift = 6}, 17, true},
      {"no RoPE, D 40, Dv 24, M 12", {.T = 1, .D = 40, .Dv = 24, .M = 12, .window = 8, .shift = 8, .rope = false}, 12},
      {"slot feature map swish, G = 2, two tokens",
       {.T = 2, .Hq = 4, .Hkv = 2, .D = 32, .Dv = 32, .M = 16, .window = 8, .shift = 8, .slot_silu = true}, 50},
  };
  for (const Regime& r : regimes) {
    for (DType dt : {DType::f32, DType::bf16}) {
      DYNAMIC_SECTION(r.name << " " << dtype_name(dt)) {
        const DecodeShape& d = r.d;
        DecodeCase c = random_decode_case(d, 5);
        const int64_t rows = d.window < 0 ? r.pos + d.T + 8 : c.ring_rows(r.pos + d.T);
        if (d.bias) c.bias = random_tensor({d.Hq, (d.window < 0 ? r.pos + d.T : d.window) + 2}, 8, DType::f64, 0.5);
        const NhaDecodeState st0 = random_state(c, rows, 40);
        // Both sides start from the device's rounding of the inputs and the state.
        const Device gpu = Device::cuda(0);
        auto on_gpu = [&](const Tensor& t, DType to) { return t.defined() ? t.to(to).to(gpu) : Tensor(); };
        auto rounded = [&](const Tensor& t, DType to) { return t.defined() ? t.to(to).to(DType::f64) : Tensor(); };
        NhaDecodeState cpu = cast_state(st0, dt, Device::cpu());
        cpu = {host64(cpu.HK), host64(cpu.HV), host64(cpu.ring_k), host64(cpu.ring_v), host64(cpu.ring_s), host64(cpu.ring_g)};
        NhaDecodeState dev = cast_state(st0, dt, gpu);
        NhaDecodeParams p = c.params(r.pos);
        p.split = r.split;
        p.long_ratio = !r.split && d.M > 0;
        const RopeTable table = rope_table(10000.0, d.D, r.pos + d.T, std::nullopt, gpu);
        const NhaDecodeOutputs want =
            nha_decode_step(rounded(c.q, dt), rounded(c.k, dt), rounded(c.v, dt), rounded(c.s, DType::f32),
                                rounded(c.g, DType::f32), rounded(c.bias, dt), d.rope ? &table : nullptr, cpu, p);
        const NhaDecodeOutputs got =
            nha_decode_step(on_gpu(c.q, dt), on_gpu(c.k, dt), on_gpu(c.v, dt), on_gpu(c.s, DType::f32),
                                 on_gpu(c.g, DType::f32), on_gpu(c.bias, dt), d.rope ? &table : nullptr, dev, p);
        const double tol = dt == DType::bf16 ? 1e-2 : 2e-5;  // bf16: the output's own rounding
        REQUIRE(got.o.defined() == want.o.defined());
        if (want.o.defined()) REQUIRE(rel_error(host64(got.o), want.o) < tol);
        REQUIRE(got.o_window.defined() == want.o_window.defined());
        if (want.o_window.defined()) REQUIRE(rel_error(host64(got.o_window), want.o_window) < tol);
        if (p.long_ratio) REQUIRE(rel_error(host64(got.long_ratio), want.long_ratio) < 2e-5);
        if (d.M > 0) {
          REQUIRE(rel_error(host64(dev.HK), cpu.HK) < 2e-6);
          REQUIRE(rel_error(host64(dev.HV), cpu.HV) < 2e-6);
        }
        // The ring is copied, never computed: equal to the bit, the untouched slots included.
        if (cpu.ring_k.defined()) {
          REQUIRE(rel_error(host64(dev.ring_k), cpu.ring_k) == 0.0);
          REQUIRE(rel_error(host64(dev.ring_v), cpu.ring_v) == 0.0);
        }
        if (cpu.ring_s.defined()) {
          REQUIRE(rel_error(host64(dev.ring_s), cpu.ring_s) == 0.0);
          REQUIRE(rel_error(host64(dev.ring_g), cpu.ring_g) == 0.0);
        }
      }
    }
  }
}
