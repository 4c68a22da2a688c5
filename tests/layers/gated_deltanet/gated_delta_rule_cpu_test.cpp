// The gated delta rule on the CPU: gradients of both forms, chunked == recurrent, the golden files
// through the chunked form, and the invariants of gated_deltanet.md 6.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/safetensors.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"
#include "layers/norm/l2norm_op.h"
#include "layers/op_test_util.h"

using namespace hyb;

namespace {

struct DeltaCase {
  Tensor q, k, v, beta, g, S0;  // S0 may be undefined
};

// q and k unit vectors per head (the layer's L2 norm), beta in (0, 1), g in [-0.6, -0.02].
DeltaCase random_case(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V, bool with_s0, uint64_t seed,
                      DType dtype = DType::f64) {
  auto unit = [&](uint64_t s) { return l2norm_forward(random_tensor({B, T, H, K}, s, dtype), 1e-12, L2NormEps::clamp, nullptr); };
  DeltaCase c{unit(seed), unit(seed + 1), random_tensor({B, T, HV, V}, seed + 2, dtype),
              uniform_tensor({B, T, HV}, seed + 3, 0.05, 0.95, dtype), uniform_tensor({B, T, HV}, seed + 4, -0.6, -0.02, dtype), Tensor()};
  if (with_s0) c.S0 = random_tensor({B, HV, K, V}, seed + 5, dtype);
  return c;
}

std::map<std::string, Tensor> run_case(const DeltaCase& c, const GatedDeltaParams& p, const Tensor& dout,
                                       const Tensor& dfinal) {
  Var q(c.q, true), k(c.k, true), v(c.v, true), beta(c.beta, true), g(c.g, true);
  Var S0 = c.S0.defined() ? Var(c.S0, true) : Var();
  GatedDeltaVars r = gated_delta_rule(q, k, v, beta, g, S0, p);
  backward_with_final_state(r.o, dout, r.final_state, dfinal);
  std::map<std::string, Tensor> out{{"o", r.o.data()}, {"final_state", r.final_state.data()},
                                    {"dq", q.grad()},   {"dk", k.grad()},
                                    {"dv", v.grad()},   {"dbeta", beta.grad()},
                                    {"dg", g.grad()}};
  if (S0.defined()) out["dS0"] = S0.grad();
  return out;
}

constexpr auto params = chunk_params<GatedDeltaParams>;

}  // namespace

TEST_CASE("gated_delta_rule gradients of q, k, v, beta, g and S0 match finite differences, through the final state too",
          "[gated_delta_rule][cpu][grad]") {
  // T = 70 crosses the recurrent backward's checkpoint (64); HV = 4 value heads on H = 2 q/k heads;
  // K = 4, V = 3 and chunk 4 as gated_deltanet.md 6.6.
  for (int64_t chunk : {0, 4}) {
    for (int64_t T : {11, 70}) {
      DYNAMIC_SECTION("chunk " << chunk << " T " << T) {
        DeltaCase c = random_case(1, T, 2, 4, 4, 3, true, 100 + uint64_t(T));
        auto r = gradcheck(
            [&](const std::vector<Var>& x) {
              GatedDeltaVars y = gated_delta_rule(x[0], x[1], x[2], x[3], x[4], x[5], params(0.5, chunk));
              return std::vector<Var>{y.o, y.final_state};
            },
            {c.q, c.k, c.v, c.beta, c.g, c.S0});
        INFO(r.report);
        REQUIRE(r.max_error < 1e-6);
      }
    }
  }
}

TEST_CASE("chunked gated_delta_rule equals the recurrent form for T around the chunk, with and without S0 and dS_T, HV = H and 2H",
          "[gated_delta_rule][cpu]") {
  for (int64_t C : {16, 32, 64}) {
    for (int64_t T : {int64_t(1), C - 1, C, C + 1, 2 * C + 5, int64_t(37), int64_t(130)}) {
      for (int64_t HV : {2, 4}) {
        const bool state = (T + HV / 2) % 2 == 0;
        DYNAMIC_SECTION("C" << C << "-T" << T << "-HV" << HV << (state ? "-state" : "")) {
          DeltaCase c = random_case(2, T, 2, HV, 6, 5, state, 11 * uint64_t(T) + uint64_t(C));
          Tensor dout = random_tensor({2, T, HV, 5}, 900 + uint64_t(T));
          Tensor dfinal = state ? random_tensor({2, HV, 6, 5}, 901) : Tensor();
          auto ref = run_case(c, params(0.4, 0), dout, dfinal);
          auto got = run_case(c, params(0.4, C), dout, dfinal);
          require_outputs_match(got, ref, 1e-12);
        }
      }
    }
  }
}

TEST_CASE("the golden gated_delta_rule files match through the chunked form with chunks of 16, 32 and 64",
          "[gated_delta_rule][cpu][golden]") {
  for (const char* name : {"gated_delta_rule_5", "gated_delta_rule_6"}) {
    const SafetensorsFile f = load_safetensors(str_cat(HYBRID_SOURCE_DIR, "/tests/golden/", name, ".safetensors"));
    const double scale = std::stod(f.metadata.at("scale"));
    for (int64_t C : {16, 32, 64}) {
      DYNAMIC_SECTION(name << " C" << C) {
        DeltaCase c{f.get("in.q"), f.get("in.k"), f.get("in.v"), f.get("in.beta"), f.get("in.g"), Tensor()};
        auto got = run_case(c, params(scale, C), f.get("grad_out.o"), Tensor());
        require_golden_outputs(f, got, {"q", "k", "v", "beta", "g"});
      }
    }
  }
}

TEST_CASE("with beta = 0 the state only decays: S_T = exp(sum g) S0, o_t = scale exp(G_t) S0^T q_t, dv = 0",
          "[gated_delta_rule][cpu]") {
  const int64_t B = 1, T = 21, H = 2, K = 3, V = 4;
  DeltaCase c = random_case(B, T, H, H, K, V, true, 300);
  c.beta = Tensor::zeros({B, T, H}, DType::f64);
  for (int64_t chunk : {0, 8}) {
    auto r = run_case(c, params(0.3, chunk), random_tensor({B, T, H, V}, 301), random_tensor({B, H, K, V}, 302));
    const std::vector<double> q = c.q.to_double_vector(), g = c.g.to_double_vector(), s0 = c.S0.to_double_vector();
    const std::vector<double> o = r.at("o").to_double_vector(), fin = r.at("final_state").to_double_vector();
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
    for (double x : r.at("dv").to_double_vector()) REQUIRE(x == 0.0);
    for (const auto& [name, t] : r)
      for (double x : t.to_double_vector()) REQUIRE(std::isfinite(x));
  }
}

TEST_CASE("a chunk of beta = 0 inside a longer sequence carries the state decayed by exp(G_n) and nothing written",
          "[gated_delta_rule][cpu]") {
  const int64_t B = 1, T = 24, H = 1, K = 4, V = 3;
  DeltaCase c = random_case(B, T, H, H, K, V, true, 350);
  std::vector<double> beta = c.beta.to_double_vector(), g = c.g.to_double_vector();
  for (int64_t t = 8; t < 16; ++t) beta[size_t(t)] = 0.0;
  c.beta = Tensor::from_vector<double>(beta, {B, T, H});
  for (int64_t chunk : {0, 8}) {
    GatedDeltaParams p = params(0.5, chunk);
    const Tensor S8 = gated_delta_rule_forward(c.q.narrow(1, 0, 8), c.k.narrow(1, 0, 8), c.v.narrow(1, 0, 8),
                                               c.beta.narrow(1, 0, 8), c.g.narrow(1, 0, 8), c.S0, p, nullptr).final_state;
    const Tensor S16 = gated_delta_rule_forward(c.q.narrow(1, 0, 16), c.k.narrow(1, 0, 16), c.v.narrow(1, 0, 16),
                                                c.beta.narrow(1, 0, 16), c.g.narrow(1, 0, 16), c.S0, p, nullptr).final_state;
    double Gn = 0;
    for (int64_t t = 8; t < 16; ++t) Gn += g[size_t(t)];
    const std::vector<double> a = S8.to_double_vector(), b = S16.to_double_vector();
    for (size_t e = 0; e < a.size(); ++e) REQUIRE(b[e] == Approx(std::exp(Gn) * a[e]).epsilon(1e-12));
  }
}

TEST_CASE("with g = 0, beta = 1, scale 1 and orthonormal keys the state is a key-value store with overwrite",
          "[gated_delta_rule][cpu]") {
  // K = V = 4, writes at keys e0, e1, e0, e2, e1, e3 (gated_deltanet.md 6.4).
  const int64_t T = 6, K = 4, V = 4;
  const int keys[T] = {0, 1, 0, 2, 1, 3};
  std::vector<double> kv(size_t(T * K), 0.0);
  for (int64_t t = 0; t < T; ++t) kv[size_t(t * K + keys[t])] = 1.0;
  Tensor k = Tensor::from_vector<double>(kv, {1, T, 1, K});
  Tensor v = random_tensor({1, T, 1, V}, 400);
  Tensor ones = Tensor::full({1, T, 1}, 1.0, DType::f64), zeros = Tensor::zeros({1, T, 1}, DType::f64);
  const std::vector<double> vv = v.to_double_vector();
  std::vector<double> states[2];
  for (int64_t chunk : {0, 4}) {
    GatedDeltaOutputs r = gated_delta_rule_forward(k, k, v, ones, zeros, Tensor(), params(1.0, chunk), nullptr);
    // Querying q_t = k_t returns v_t exactly.
    REQUIRE(max_rel_error(r.o.to_double_vector(), vv, 1e-300) < 1e-14);
    // S^T e_i is the latest value written at e_i: v_2 (e0), v_4 (e1), v_3 (e2), v_5 (e3).
    const std::vector<double> S = r.final_state.to_double_vector();
    const int latest[K] = {2, 4, 3, 5};
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) REQUIRE(S[size_t(i * V + j)] == Approx(vv[size_t(latest[i] * V + j)]).epsilon(1e-14));
    states[chunk ? 1 : 0] = S;
  }
  REQUIRE(max_rel_error(states[1], states[0], 1e-300) < 1e-15);
  // A key never written reads 0: K = 5 with keys in the first four dims.
  std::vector<double> k5(size_t(T * 5), 0.0);
  for (int64_t t = 0; t < T; ++t) k5[size_t(t * 5 + keys[t])] = 1.0;
  Tensor kk = Tensor::from_vector<double>(k5, {1, T, 1, 5});
  const std::vector<double> S5 =
      gated_delta_rule_forward(kk, kk, v, ones, zeros, Tensor(), params(1.0, 0), nullptr).final_state.to_double_vector();
  for (int64_t j = 0; j < V; ++j) REQUIRE(S5[size_t(4 * V + j)] == 0.0);
}

TEST_CASE("GVA (HV = 2H) equals the run with q and k repeated per value head by j / 2, dq and dk summed",
          "[gated_delta_rule][cpu]") {
  const int64_t B = 2, T = 17, H = 2, HV = 4, K = 3, V = 2;
  DeltaCase gva = random_case(B, T, H, HV, K, V, true, 500);
  auto expand = [&](const Tensor& x) {
    Tensor e = Tensor::empty({B, T, HV, K}, DType::f64);
    for (int64_t j = 0; j < HV; ++j) e.narrow(2, j, 1).copy_(x.narrow(2, j / 2, 1));
    return e;
  };
  DeltaCase full{expand(gva.q), expand(gva.k), gva.v, gva.beta, gva.g, gva.S0};
  Tensor dout = random_tensor({B, T, HV, V}, 501), dfinal = random_tensor({B, HV, K, V}, 502);
  for (int64_t chunk : {0, 8}) {
    auto a = run_case(gva, params(0.6, chunk), dout, dfinal);
    auto b = run_case(full, params(0.6, chunk), dout, dfinal);
    for (const char* name : {"o", "final_state", "dv", "dbeta", "dg", "dS0"})
      REQUIRE(rel_error(a.at(name), b.at(name)) < 1e-13);
    for (const char* name : {"dq", "dk"}) {
      const Tensor& e = b.at(name);
      Tensor summed = Tensor::empty({B, T, H, K}, DType::f64);
      for (int64_t i = 0; i < H; ++i) {
        std::vector<double> s0 = e.narrow(2, 2 * i, 1).contiguous().to_double_vector(),
                            s1 = e.narrow(2, 2 * i + 1, 1).contiguous().to_double_vector();
        for (size_t n = 0; n < s0.size(); ++n) s0[n] += s1[n];
        summed.narrow(2, i, 1).copy_(Tensor::from_vector<double>(s0, {B, T, 1, K}));
      }
      REQUIRE(rel_error(a.at(name), summed) < 1e-13);
    }
  }
}

TEST_CASE("gated_delta_rule stays finite with beta = 0, g = -50, g = 0, T = 1 and a short last chunk",
          "[gated_delta_rule][cpu]") {
  for (int variant = 0; variant < 4; ++variant) {
    DYNAMIC_SECTION("variant " << variant) {
      const int64_t T = variant == 3 ? 1 : 37;
      DeltaCase c = random_case(1, T, 2, 2, 4, 3, true, 600 + uint64_t(variant));
      if (variant == 0) c.beta = Tensor::zeros({1, T, 2}, DType::f64);
      if (variant == 1) c.g = Tensor::full({1, T, 2}, -50.0, DType::f64);
      if (variant == 2) c.g = Tensor::zeros({1, T, 2}, DType::f64);
      for (int64_t chunk : {0, 16}) {
        auto r = run_case(c, params(0.5, chunk), random_tensor({1, T, 2, 3}, 601), random_tensor({1, 2, 4, 3}, 602));
        for (const auto& [name, t] : r) {
          INFO(name);
          for (double x : t.to_double_vector()) REQUIRE(std::isfinite(x));
        }
      }
    }
  }
}

TEST_CASE("the f32 gated_delta_rule agrees with f64 in both forms, and two backward runs are bitwise identical",
          "[gated_delta_rule][cpu]") {
  DeltaCase c64 = random_case(2, 45, 2, 4, 8, 6, true, 700);
  DeltaCase c32{c64.q.to(DType::f32), c64.k.to(DType::f32),  c64.v.to(DType::f32),
                c64.beta.to(DType::f32), c64.g.to(DType::f32), c64.S0.to(DType::f32)};
  Tensor dout = random_tensor({2, 45, 4, 6}, 701), dfinal = random_tensor({2, 4, 8, 6}, 702);
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

TEST_CASE("gated_delta_rule rejects inputs whose shapes or dtypes do not fit, naming the op and the shapes",
          "[gated_delta_rule][cpu]") {
  DeltaCase c = random_case(2, 5, 2, 4, 3, 2, false, 800);
  GatedDeltaParams p;
  REQUIRE_THROWS_WITH(gated_delta_rule_forward(c.q, c.k.narrow(3, 0, 2), c.v, c.beta, c.g, Tensor(), p, nullptr),
                      Catch::Contains("gated_delta_rule_forward") && Catch::Contains("(2, 5, 2, 2)"));
  REQUIRE_THROWS_WITH(gated_delta_rule_forward(c.q, c.k, c.v.narrow(2, 0, 3), c.beta.narrow(2, 0, 3),
                                               c.g.narrow(2, 0, 3), Tensor(), p, nullptr),
                      Catch::Contains("HV must be a multiple of H"));
  REQUIRE_THROWS_WITH(gated_delta_rule_forward(c.q, c.k, c.v, c.beta.narrow(1, 0, 4), c.g, Tensor(), p, nullptr),
                      Catch::Contains("beta is (2, 4, 4)") && Catch::Contains("(2, 5, 4)"));
  REQUIRE_THROWS_WITH(gated_delta_rule_forward(c.q, c.k, c.v, c.beta, c.g, random_tensor({2, 4, 2, 3}, 1), p, nullptr),
                      Catch::Contains("initial state is (2, 4, 2, 3)") && Catch::Contains("(2, 4, 3, 2)"));
  REQUIRE_THROWS_WITH(gated_delta_rule_forward(c.q, c.k, c.v, c.beta.to(DType::f32), c.g, Tensor(), p, nullptr),
                      Catch::Contains("beta and g must be f64"));
}
