// simple_gla (the Mamba2 SSD core) on the CPU: gradients of both forms, chunked == recurrent, the
// golden files through the chunked form, and the invariants of mamba2.md 6.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "layers/mamba2/simple_gla_op.h"
#include "layers/op_test_util.h"

using namespace hyb;

namespace {

// Log decays in [lo, hi] (<= 0), the op's domain.
Tensor log_decay(const Shape& shape, uint64_t seed, double lo = -0.6, double hi = -0.02, DType dtype = DType::f64) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_uniform(t, seed, "test.log_decay", lo, hi);
  return t;
}

struct GlaCase {
  Tensor q, k, v, g, S0;  // S0 may be undefined
};

GlaCase random_case(int64_t B, int64_t T, int64_t Gq, int64_t H, int64_t K, int64_t V, bool with_s0, uint64_t seed,
                    DType dtype = DType::f64) {
  GlaCase c{random_tensor({B, T, Gq, K}, seed, dtype), random_tensor({B, T, Gq, K}, seed + 1, dtype),
            random_tensor({B, T, H, V}, seed + 2, dtype), log_decay({B, T, H}, seed + 3, -0.6, -0.02, dtype), Tensor()};
  if (with_s0) c.S0 = random_tensor({B, H, K, V}, seed + 4, dtype);
  return c;
}

// Forward and backward through the tape; "o", "final_state" and "d<input>" by name.
std::map<std::string, Tensor> run_case(const GlaCase& c, const SimpleGlaParams& p, const Tensor& dout,
                                       const Tensor& dfinal) {
  Var q(c.q, true), k(c.k, true), v(c.v, true), g(c.g, true), S0 = c.S0.defined() ? Var(c.S0, true) : Var();
  SimpleGlaVars r = simple_gla(q, k, v, g, S0, p);
  backward_with_final_state(r.o, dout, r.final_state, dfinal);
  std::map<std::string, Tensor> out{{"o", r.o.data()}, {"final_state", r.final_state.data()}, {"dq", q.grad()},
                                    {"dk", k.grad()},   {"dv", v.grad()},                     {"dg", g.grad()}};
  if (S0.defined()) out["dS0"] = S0.grad();
  return out;
}

constexpr auto params = chunk_params<SimpleGlaParams>;

}  // namespace

TEST_CASE("simple_gla gradients of q, k, v, g and S0 match finite differences, through the final state too",
          "[simple_gla][cpu][grad]") {
  // T = 70 crosses the recurrent backward's checkpoint (64); Gq = 1 < H = 2 shares q and k; chunk 4 (mamba2.md 6.6).
  for (int64_t chunk : {0, 4}) {
    for (int64_t T : {11, 70}) {
      DYNAMIC_SECTION("chunk " << chunk << " T " << T) {
        GlaCase c = random_case(1, T, 1, 2, 3, 2, true, 100 + uint64_t(T));
        auto r = gradcheck(
            [&](const std::vector<Var>& x) {
              SimpleGlaVars y = simple_gla(x[0], x[1], x[2], x[3], x[4], params(0.7, chunk));
              return std::vector<Var>{y.o, y.final_state};
            },
            {c.q, c.k, c.v, c.g, c.S0});
        INFO(r.report);
        REQUIRE(r.max_error < 1e-6);
      }
    }
  }
}

TEST_CASE("chunked simple_gla equals the recurrent form for T around the chunk, with and without S0 and dS_T, shared q/k",
          "[simple_gla][cpu]") {
  for (int64_t C : {16, 32, 64, 128, 256}) {
    for (int64_t T : {int64_t(1), C - 1, C, C + 1, 2 * C + 5, int64_t(37), int64_t(130)}) {
      for (int64_t Gq : {2, 1}) {
        const bool state = (T + Gq) % 2 == 0;  // alternate: half the cases with S0 and dS_T
        DYNAMIC_SECTION("C" << C << "-T" << T << "-Gq" << Gq << (state ? "-state" : "")) {
          GlaCase c = random_case(2, T, Gq, 2, 5, 3, state, 7 * uint64_t(T) + uint64_t(C));
          Tensor dout = random_tensor({2, T, 2, 3}, 900 + uint64_t(T));
          Tensor dfinal = state ? random_tensor({2, 2, 5, 3}, 901) : Tensor();
          auto ref = run_case(c, params(0.5, 0), dout, dfinal);
          auto got = run_case(c, params(0.5, C), dout, dfinal);
          require_outputs_match(got, ref, 1e-12);
        }
      }
    }
  }
}

TEST_CASE("the golden simple_gla files match through the chunked form with chunks of 16, 32 and 64",
          "[simple_gla][cpu][golden]") {
  for (const char* name : {"simple_gla_7", "simple_gla_8"}) {
    const SafetensorsFile f = load_safetensors(str_cat(HYBRID_SOURCE_DIR, "/tests/golden/", name, ".safetensors"));
    const double scale = std::stod(f.metadata.at("scale"));
    for (int64_t C : {16, 32, 64}) {
      DYNAMIC_SECTION(name << " C" << C) {
        GlaCase c{f.get("in.q"), f.get("in.k"), f.get("in.v"), f.get("in.g"), Tensor()};
        auto got = run_case(c, params(scale, C), f.get("grad_out.o"), Tensor());
        require_golden_outputs(f, got, {"q", "k", "v", "g"});
      }
    }
  }
}

TEST_CASE("with k = 0 the state only decays: S_T = exp(sum g) S0 and o_t = scale exp(G_t) S0^T q_t; o = dq = 0 from S0 = 0",
          "[simple_gla][cpu]") {
  const int64_t B = 1, T = 9, H = 2, K = 3, V = 4;
  GlaCase c = random_case(B, T, H, H, K, V, true, 300);
  c.k = Tensor::zeros({B, T, H, K}, DType::f64);
  for (int64_t chunk : {0, 4}) {
    SimpleGlaOutputs r = simple_gla_forward(c.q, c.k, c.v, c.g, c.S0, params(0.3, chunk), nullptr);
    const std::vector<double> q = c.q.to_double_vector(), g = c.g.to_double_vector(), s0 = c.S0.to_double_vector();
    const std::vector<double> o = r.o.to_double_vector(), fin = r.final_state.to_double_vector();
    for (int64_t h = 0; h < H; ++h) {
      double G = 0;
      for (int64_t t = 0; t < T; ++t) {
        G += g[size_t(t * H + h)];
        for (int64_t j = 0; j < V; ++j) {
          double want = 0;
          for (int64_t i = 0; i < K; ++i) want += s0[size_t((h * K + i) * V + j)] * q[size_t((t * H + h) * K + i)];
          REQUIRE(o[size_t((t * H + h) * V + j)] == Approx(0.3 * std::exp(G) * want).epsilon(1e-12).margin(1e-15));
        }
      }
      for (int64_t e = 0; e < K * V; ++e)
        REQUIRE(fin[size_t(h * K * V + e)] == Approx(std::exp(G) * s0[size_t(h * K * V + e)]).epsilon(1e-12));
    }
    GlaCase empty = c;
    empty.S0 = Tensor();
    auto z = run_case(empty, params(0.3, chunk), random_tensor({B, T, H, V}, 301), Tensor());
    for (double x : z.at("o").to_double_vector()) REQUIRE(x == 0.0);
    for (double x : z.at("dq").to_double_vector()) REQUIRE(x == 0.0);
  }
}

TEST_CASE("with g = 0 simple_gla is causal linear attention: o_t = scale sum_{s <= t} (q_t . k_s) v_s", "[simple_gla][cpu]") {
  const int64_t B = 2, T = 13, H = 2, K = 4, V = 3;
  GlaCase c = random_case(B, T, H, H, K, V, false, 400);
  c.g = Tensor::zeros({B, T, H}, DType::f64);
  const std::vector<double> q = c.q.to_double_vector(), k = c.k.to_double_vector(), v = c.v.to_double_vector();
  for (int64_t chunk : {0, 5}) {
    const std::vector<double> o = simple_gla_forward(c.q, c.k, c.v, c.g, Tensor(), params(0.25, chunk), nullptr).o.to_double_vector();
    std::vector<double> want(o.size(), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t s = 0; s <= t; ++s) {
            double qk = 0;
            for (int64_t i = 0; i < K; ++i)
              qk += q[size_t(((b * T + t) * H + h) * K + i)] * k[size_t(((b * T + s) * H + h) * K + i)];
            for (int64_t j = 0; j < V; ++j)
              want[size_t(((b * T + t) * H + h) * V + j)] += 0.25 * qk * v[size_t(((b * T + s) * H + h) * V + j)];
          }
    REQUIRE(max_rel_error(o, want, 1e-12) < 1e-10);
  }
}

TEST_CASE("shared q and k (Gq = 2, H = 4) equal the run with q and k expanded to the heads by h / 2, gradients summed",
          "[simple_gla][cpu]") {
  const int64_t B = 2, T = 19, Gq = 2, H = 4, K = 3, V = 2;
  GlaCase shared = random_case(B, T, Gq, H, K, V, true, 500);
  // Expanded: head h reads group h / 2.
  auto expand = [&](const Tensor& x) {
    Tensor e = Tensor::empty({B, T, H, K}, DType::f64);
    for (int64_t h = 0; h < H; ++h) e.narrow(2, h, 1).copy_(x.narrow(2, h / 2, 1));
    return e;
  };
  GlaCase full{expand(shared.q), expand(shared.k), shared.v, shared.g, shared.S0};
  Tensor dout = random_tensor({B, T, H, V}, 501), dfinal = random_tensor({B, H, K, V}, 502);
  for (int64_t chunk : {0, 8}) {
    auto a = run_case(shared, params(0.6, chunk), dout, dfinal);
    auto b = run_case(full, params(0.6, chunk), dout, dfinal);
    for (const char* name : {"o", "final_state", "dv", "dg", "dS0"}) REQUIRE(rel_error(a.at(name), b.at(name)) < 1e-13);
    for (const char* name : {"dq", "dk"}) {
      const Tensor& e = b.at(name);
      Tensor summed = Tensor::empty({B, T, Gq, K}, DType::f64);
      for (int64_t grp = 0; grp < Gq; ++grp) {
        std::vector<double> s0 = e.narrow(2, 2 * grp, 1).contiguous().to_double_vector(),
                            s1 = e.narrow(2, 2 * grp + 1, 1).contiguous().to_double_vector();
        for (size_t i = 0; i < s0.size(); ++i) s0[i] += s1[i];
        summed.narrow(2, grp, 1).copy_(Tensor::from_vector<double>(s0, {B, T, 1, K}));
      }
      REQUIRE(rel_error(a.at(name), summed) < 1e-13);
    }
  }
}

TEST_CASE("extreme decays (g = -50, g = -1e-6, a chunk with G_n = -400) give finite outputs and gradients",
          "[simple_gla][cpu]") {
  const int64_t B = 1, T = 40, H = 2, K = 3, V = 3;
  for (double gv : {-50.0, -1e-6, -25.0}) {  // -25 over 16 tokens: G_n = -400 in every full chunk
    DYNAMIC_SECTION("g " << gv) {
      GlaCase c = random_case(B, T, H, H, K, V, true, 600);
      c.g = Tensor::full({B, T, H}, gv, DType::f64);
      for (int64_t chunk : {0, 16}) {
        auto r = run_case(c, params(1.0, chunk), random_tensor({B, T, H, V}, 601), random_tensor({B, H, K, V}, 602));
        for (const auto& [name, t] : r) {
          INFO(name);
          for (double x : t.to_double_vector()) REQUIRE(std::isfinite(x));
        }
      }
    }
  }
}

TEST_CASE("the f32 simple_gla agrees with f64 in both forms, and two backward runs are bitwise identical",
          "[simple_gla][cpu]") {
  GlaCase c64 = random_case(2, 45, 1, 3, 8, 6, true, 700);
  GlaCase c32{c64.q.to(DType::f32), c64.k.to(DType::f32), c64.v.to(DType::f32), c64.g.to(DType::f32),
              c64.S0.to(DType::f32)};
  Tensor dout = random_tensor({2, 45, 3, 6}, 701), dfinal = random_tensor({2, 3, 8, 6}, 702);
  for (int64_t chunk : {0, 16}) {
    auto a = run_case(c64, params(0.4, chunk), dout, dfinal);
    auto b = run_case(c32, params(0.4, chunk), dout.to(DType::f32), dfinal.to(DType::f32));
    auto b2 = run_case(c32, params(0.4, chunk), dout.to(DType::f32), dfinal.to(DType::f32));
    for (const auto& [name, t] : a) {
      INFO(name);
      REQUIRE(rel_error(b.at(name), t) < 1e-5);
      REQUIRE(b.at(name).to_double_vector() == b2.at(name).to_double_vector());
    }
  }
}

TEST_CASE("simple_gla rejects inputs whose shapes or dtypes do not fit, naming the op and the shapes", "[simple_gla][cpu]") {
  GlaCase c = random_case(2, 5, 2, 4, 3, 2, false, 800);
  SimpleGlaParams p;
  REQUIRE_THROWS_WITH(simple_gla_forward(c.q, c.k.narrow(3, 0, 2), c.v, c.g, Tensor(), p, nullptr),
                      Catch::Contains("simple_gla_forward") && Catch::Contains("(2, 5, 2, 2)") &&
                          Catch::Contains("(2, 5, 2, 3)"));
  REQUIRE_THROWS_WITH(simple_gla_forward(c.q, c.k, c.v.narrow(2, 0, 3), c.g.narrow(2, 0, 3), Tensor(), p, nullptr),
                      Catch::Contains("H must be a multiple of Gq"));
  REQUIRE_THROWS_WITH(simple_gla_forward(c.q, c.k, c.v, c.g.narrow(1, 0, 4), Tensor(), p, nullptr),
                      Catch::Contains("g is (2, 4, 4)") && Catch::Contains("(B, T, H) = (2, 5, 4)"));
  REQUIRE_THROWS_WITH(simple_gla_forward(c.q, c.k, c.v, c.g, random_tensor({2, 4, 2, 3}, 1), p, nullptr),
                      Catch::Contains("initial state is (2, 4, 2, 3)") && Catch::Contains("(2, 4, 3, 2)"));
  REQUIRE_THROWS_WITH(simple_gla_forward(c.q, c.k, c.v, c.g.to(DType::f32), Tensor(), p, nullptr),
                      Catch::Contains("g must be f64"));
  p.chunk_size = -1;
  REQUIRE_THROWS_WITH(simple_gla_forward(c.q, c.k, c.v, c.g, Tensor(), p, nullptr), Catch::Contains("chunk_size"));
}
