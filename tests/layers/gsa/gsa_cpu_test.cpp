// The gsa op on the CPU: gradients of every input (gsa.md 7.2), the golden files in f64, the gate
// gradient identity of 3.5, the special cases of 7.3 and the state composition and GQA rules of 7.4.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "autograd/gradcheck.h"
#include "autograd/ops/shape_ops.h"
#include "compare.h"
#include "core/safetensors.h"
#include "layers/gsa/gsa_op.h"
#include "layers/op_test_util.h"

using namespace hyb;

namespace {

struct GsaCase {
  Tensor q, k, v, s, g, Hk0, Hv0;  // Hk0, Hv0 may be undefined
};

// g in [-0.9, -0.01] (the golden range), s ~ N(0, 1) like the golden files.
GsaCase random_case(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t K, int64_t V, int64_t M, bool states,
                    uint64_t seed) {
  GsaCase c{random_tensor({B, T, Hq, K}, seed), random_tensor({B, T, Hkv, K}, seed + 1),
            random_tensor({B, T, Hkv, V}, seed + 2), random_tensor({B, T, Hkv, M}, seed + 3),
            uniform_tensor({B, T, Hkv, M}, seed + 4, -0.9, -0.01), Tensor(), Tensor()};
  if (states) {
    c.Hk0 = random_tensor({B, Hkv, K, M}, seed + 5);
    c.Hv0 = random_tensor({B, Hkv, M, V}, seed + 6);
  }
  return c;
}

GsaParams params(double scale) {
  GsaParams p;
  p.scale = scale;
  return p;
}

std::map<std::string, Tensor> run_case(const GsaCase& c, double scale, const Tensor& dout, const Tensor& dHk,
                                       const Tensor& dHv) {
  Var q(c.q, true), k(c.k, true), v(c.v, true), s(c.s, true), g(c.g, true);
  Var Hk0 = c.Hk0.defined() ? Var(c.Hk0, true) : Var(), Hv0 = c.Hv0.defined() ? Var(c.Hv0, true) : Var();
  GsaVars r = gsa(q, k, v, s, g, Hk0, Hv0, params(scale));
  std::vector<Var> roots{r.o};
  std::vector<Tensor> droots{dout};
  if (dHk.defined()) {
    roots.push_back(r.Hk);
    droots.push_back(dHk);
    roots.push_back(r.Hv);
    droots.push_back(dHv);
  }
  backward(roots, droots);
  std::map<std::string, Tensor> out{{"o", r.o.data()}, {"Hk", r.Hk.data()}, {"Hv", r.Hv.data()}, {"dq", q.grad()},
                                    {"dk", k.grad()},  {"dv", v.grad()},    {"ds", s.grad()},    {"dg", g.grad()}};
  if (Hk0.defined()) {
    out["dHk0"] = Hk0.grad();
    out["dHv0"] = Hv0.grad();
  }
  return out;
}

}  // namespace

TEST_CASE("gsa gradients of q, k, v, s, g, Hk0 and Hv0 match finite differences, through the final memories too",
          "[gsa][cpu][grad]") {
  // GQA (Hq 4, Hkv 2), K 3, V 4, M 3, with and without initial memories (gsa.md 7.2).
  for (bool states : {false, true}) {
    DYNAMIC_SECTION((states ? "with" : "without") << " initial memories") {
      GsaCase c = random_case(2, 13, 4, 2, 3, 4, 3, states, 10);
      std::vector<Tensor> inputs{c.q, c.k, c.v, c.s, c.g};
      if (states) inputs.insert(inputs.end(), {c.Hk0, c.Hv0});
      auto r = gradcheck(
          [&](const std::vector<Var>& x) {
            GsaVars y = gsa(x[0], x[1], x[2], x[3], x[4], states ? x[5] : Var(), states ? x[6] : Var(), params(0.7));
            return std::vector<Var>{y.o, y.Hk, y.Hv};
          },
          inputs);
      INFO(r.report);
      REQUIRE(r.max_error < 1e-6);
    }
  }
}

TEST_CASE("the golden gsa files match in f64 (o, both final memories, every input gradient)", "[gsa][cpu][golden]") {
  for (const char* name : {"gsa_3", "gsa_4"}) {
    DYNAMIC_SECTION(name) {
      const SafetensorsFile f = load_safetensors(str_cat(HYBRID_SOURCE_DIR, "/tests/golden/", name, ".safetensors"));
      GsaCase c{f.get("in.q"), f.get("in.k"), f.get("in.v"), f.get("in.s"), f.get("in.g"), Tensor(), Tensor()};
      auto got = run_case(c, std::stod(f.metadata.at("scale")), f.get("grad_out.o"), Tensor(), Tensor());
      REQUIRE(rel_error(got.at("o"), f.get("out.o")) < 1e-12);
      REQUIRE(rel_error(got.at("Hk"), f.get("out.final_state0")) < 1e-12);
      REQUIRE(rel_error(got.at("Hv"), f.get("out.final_state1")) < 1e-12);
      for (const char* in : {"q", "k", "v", "s", "g"}) {
        INFO(in);
        REQUIRE(rel_error(got.at(str_cat("d", in)), f.get(str_cat("grad_in.", in))) < 1e-12);
      }
    }
  }
}

TEST_CASE("the gsa gate gradient equals the closed form of gsa.md 3.5 built from z, dz, a, da, s and ds",
          "[gsa][cpu][grad]") {
  const int64_t B = 1, T = 19, Hq = 4, Hkv = 2, K = 3, V = 5, M = 4;
  const double scale = 0.6;
  GsaCase c = random_case(B, T, Hq, Hkv, K, V, M, true, 40);
  Tensor dout = random_tensor({B, T, Hq, V}, 41), dHk = random_tensor({B, Hkv, K, M}, 42),
         dHv = random_tensor({B, Hkv, M, V}, 43);
  auto r = run_case(c, scale, dout, dHk, dHv);
  // Rebuild Hk_t, Hv_t, z, a, da, dz per token in plain loops and apply the identity.
  const auto q = c.q.to_double_vector(), k = c.k.to_double_vector(), v = c.v.to_double_vector(),
             s = c.s.to_double_vector(), g = c.g.to_double_vector(), hk0 = c.Hk0.to_double_vector(),
             hv0 = c.Hv0.to_double_vector(), dO = dout.to_double_vector(), dhk = dHk.to_double_vector(),
             dhv = dHv.to_double_vector(), ds = r.at("ds").to_double_vector(), dg = r.at("dg").to_double_vector();
  for (int64_t j = 0; j < Hkv; ++j) {
    std::vector<double> Hk(hk0.begin() + j * K * M, hk0.begin() + (j + 1) * K * M),
        Hv(hv0.begin() + j * M * V, hv0.begin() + (j + 1) * M * V), dB(size_t(T * M), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t m = 0; m < M; ++m) {
        const double gam = std::exp(g[size_t((t * Hkv + j) * M + m)]), sm = s[size_t((t * Hkv + j) * M + m)];
        for (int64_t i = 0; i < K; ++i) Hk[size_t(i * M + m)] = Hk[size_t(i * M + m)] * gam + k[size_t((t * Hkv + j) * K + i)] * sm;
        for (int64_t e = 0; e < V; ++e) Hv[size_t(m * V + e)] = Hv[size_t(m * V + e)] * gam + sm * v[size_t((t * Hkv + j) * V + e)];
      }
      for (int64_t h = 2 * j; h < 2 * j + 2; ++h) {
        std::vector<double> z(static_cast<size_t>(M)), a(static_cast<size_t>(M)), da(static_cast<size_t>(M));
        double mx = -1e300, sum = 0, ada = 0;
        for (int64_t m = 0; m < M; ++m) {
          z[size_t(m)] = 0;
          for (int64_t i = 0; i < K; ++i) z[size_t(m)] += scale * Hk[size_t(i * M + m)] * q[size_t((t * Hq + h) * K + i)];
          mx = std::max(mx, z[size_t(m)]);
        }
        for (int64_t m = 0; m < M; ++m) sum += a[size_t(m)] = std::exp(z[size_t(m)] - mx);
        for (int64_t m = 0; m < M; ++m) {
          a[size_t(m)] /= sum;
          da[size_t(m)] = 0;
          for (int64_t e = 0; e < V; ++e) da[size_t(m)] += Hv[size_t(m * V + e)] * dO[size_t((t * Hq + h) * V + e)];
          ada += a[size_t(m)] * da[size_t(m)];
        }
        for (int64_t m = 0; m < M; ++m)
          dB[size_t(t * M + m)] += z[size_t(m)] * a[size_t(m)] * (da[size_t(m)] - ada) + a[size_t(m)] * da[size_t(m)];
      }
      for (int64_t m = 0; m < M; ++m)
        dB[size_t(t * M + m)] -= s[size_t((t * Hkv + j) * M + m)] * ds[size_t((t * Hkv + j) * M + m)];
    }
    for (int64_t m = 0; m < M; ++m) {
      double tail = 0;
      for (int64_t i = 0; i < K; ++i) tail += Hk[size_t(i * M + m)] * dhk[size_t((j * K + i) * M + m)];
      for (int64_t e = 0; e < V; ++e) tail += Hv[size_t(m * V + e)] * dhv[size_t((j * M + m) * V + e)];
      double acc = tail;
      for (int64_t t = T - 1; t >= 0; --t) {
        acc += dB[size_t(t * M + m)];
        REQUIRE(dg[size_t((t * Hkv + j) * M + m)] == Approx(acc).epsilon(1e-11).margin(1e-12));
      }
    }
  }
}

TEST_CASE("gsa with one slot: a = 1, o is the gated running sum of s v, and dq = dk = 0 exactly", "[gsa][cpu]") {
  const int64_t B = 1, T = 9, H = 2, K = 3, V = 2;
  GsaCase c = random_case(B, T, H, H, K, V, 1, false, 60);
  auto r = run_case(c, 0.5, random_tensor({B, T, H, V}, 61), Tensor(), Tensor());
  for (double x : r.at("dq").to_double_vector()) REQUIRE(x == 0.0);
  for (double x : r.at("dk").to_double_vector()) REQUIRE(x == 0.0);
  const auto s = c.s.to_double_vector(), g = c.g.to_double_vector(), v = c.v.to_double_vector(),
             o = r.at("o").to_double_vector();
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> acc(size_t(V), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < V; ++e) {
        acc[size_t(e)] = std::exp(g[size_t(t * H + h)]) * acc[size_t(e)] + s[size_t(t * H + h)] * v[size_t((t * H + h) * V + e)];
        REQUIRE(o[size_t((t * H + h) * V + e)] == Approx(acc[size_t(e)]).epsilon(1e-13));
      }
  }
}

TEST_CASE("gsa with s = 0 and no initial memories: a = 1/M, o = 0 and dq = dk = dv = 0", "[gsa][cpu]") {
  GsaCase c = random_case(1, 7, 2, 1, 3, 4, 5, false, 70);
  c.s = Tensor::zeros(c.s.shape(), DType::f64);
  auto r = run_case(c, 0.5, random_tensor({1, 7, 2, 4}, 71), Tensor(), Tensor());
  for (const char* n : {"o", "dq", "dk", "dv"})
    for (double x : r.at(n).to_double_vector()) REQUIRE(x == 0.0);
}

TEST_CASE("gsa split into two runs chained by the final memories equals one run, gradients included", "[gsa][cpu]") {
  const int64_t B = 2, T = 23, T1 = 10, Hq = 2, Hkv = 1, K = 4, V = 3, M = 5;
  GsaCase c = random_case(B, T, Hq, Hkv, K, V, M, true, 80);
  Tensor dout = random_tensor({B, T, Hq, V}, 81), dHk = random_tensor({B, Hkv, K, M}, 82),
         dHv = random_tensor({B, Hkv, M, V}, 83);
  auto whole = run_case(c, 0.4, dout, dHk, dHv);
  Var q(c.q, true), k(c.k, true), v(c.v, true), s(c.s, true), g(c.g, true), Hk0(c.Hk0, true), Hv0(c.Hv0, true);
  auto part = [&](const Var& x, int64_t t0, int64_t n) { return narrow(x, 1, t0, n); };
  GsaVars a = gsa(part(q, 0, T1), part(k, 0, T1), part(v, 0, T1), part(s, 0, T1), part(g, 0, T1), Hk0, Hv0, params(0.4));
  GsaVars b = gsa(part(q, T1, T - T1), part(k, T1, T - T1), part(v, T1, T - T1), part(s, T1, T - T1),
                  part(g, T1, T - T1), a.Hk, a.Hv, params(0.4));
  backward({a.o, b.o, b.Hk, b.Hv},
           {dout.narrow(1, 0, T1).contiguous(), dout.narrow(1, T1, T - T1).contiguous(), dHk, dHv});
  REQUIRE(rel_error(a.o.data(), whole.at("o").narrow(1, 0, T1).contiguous()) < 1e-13);
  REQUIRE(rel_error(b.o.data(), whole.at("o").narrow(1, T1, T - T1).contiguous()) < 1e-13);
  REQUIRE(rel_error(b.Hk.data(), whole.at("Hk")) < 1e-13);
  REQUIRE(rel_error(b.Hv.data(), whole.at("Hv")) < 1e-13);
  const std::map<std::string, Var> leaves{{"dq", q}, {"dk", k}, {"dv", v}, {"ds", s}, {"dg", g}, {"dHk0", Hk0}, {"dHv0", Hv0}};
  for (const auto& [name, leaf] : leaves) {
    INFO(name);
    REQUIRE(rel_error(leaf.grad(), whole.at(name)) < 1e-12);
  }
}

TEST_CASE("GQA gsa equals the run with k, v, s, g repeated per query head, kv gradients summed per group",
          "[gsa][cpu]") {
  const int64_t B = 1, T = 15, Hq = 4, Hkv = 2, K = 3, V = 2, M = 4;
  GsaCase gqa = random_case(B, T, Hq, Hkv, K, V, M, false, 90);
  auto expand = [&](const Tensor& x) {
    Tensor e = Tensor::empty({x.size(0), x.size(1), Hq, x.size(3)}, DType::f64);
    for (int64_t h = 0; h < Hq; ++h) e.narrow(2, h, 1).copy_(x.narrow(2, h / 2, 1));
    return e;
  };
  GsaCase full{gqa.q, expand(gqa.k), expand(gqa.v), expand(gqa.s), expand(gqa.g), Tensor(), Tensor()};
  Tensor dout = random_tensor({B, T, Hq, V}, 91);
  auto a = run_case(gqa, 0.5, dout, Tensor(), Tensor());
  auto b = run_case(full, 0.5, dout, Tensor(), Tensor());
  REQUIRE(rel_error(a.at("o"), b.at("o")) < 1e-13);
  REQUIRE(rel_error(a.at("dq"), b.at("dq")) < 1e-13);
  for (const char* n : {"dk", "dv", "ds", "dg"}) {
    const Tensor& e = b.at(n);
    Tensor summed = Tensor::empty(a.at(n).shape(), DType::f64);
    for (int64_t j = 0; j < Hkv; ++j) {
      std::vector<double> x0 = e.narrow(2, 2 * j, 1).contiguous().to_double_vector(),
                          x1 = e.narrow(2, 2 * j + 1, 1).contiguous().to_double_vector();
      for (size_t i = 0; i < x0.size(); ++i) x0[i] += x1[i];
      summed.narrow(2, j, 1).copy_(Tensor::from_vector<double>(x0, {B, T, 1, e.size(3)}));
    }
    INFO(n);
    REQUIRE(rel_error(a.at(n), summed) < 1e-13);
  }
}

TEST_CASE("permuting the slots of s, g and the initial memories leaves o unchanged", "[gsa][cpu]") {
  const int64_t B = 1, T = 11, H = 1, K = 3, V = 2, M = 4;
  GsaCase c = random_case(B, T, H, H, K, V, M, true, 95);
  const int64_t perm[M] = {2, 0, 3, 1};
  auto permute_last = [&](const Tensor& x, int64_t dim) {
    Tensor y = Tensor::empty(x.shape(), DType::f64);
    for (int64_t m = 0; m < M; ++m) y.narrow(dim, m, 1).copy_(x.narrow(dim, perm[m], 1));
    return y;
  };
  GsaCase p{c.q, c.k, c.v, permute_last(c.s, 3), permute_last(c.g, 3), permute_last(c.Hk0, 3), permute_last(c.Hv0, 2)};
  const Tensor o1 = gsa_forward(c.q, c.k, c.v, c.s, c.g, c.Hk0, c.Hv0, params(0.5), nullptr).o;
  GsaOutputs o2 = gsa_forward(p.q, p.k, p.v, p.s, p.g, p.Hk0, p.Hv0, params(0.5), nullptr);
  REQUIRE(rel_error(o2.o, o1) < 1e-14);
  const Tensor hk1 = gsa_forward(c.q, c.k, c.v, c.s, c.g, c.Hk0, c.Hv0, params(0.5), nullptr).Hk;
  REQUIRE(rel_error(o2.Hk, permute_last(hk1, 3)) < 1e-14);
}

TEST_CASE("gsa stays finite under strong gates (tau = 0.1) and agrees in f32 with f64", "[gsa][cpu]") {
  GsaCase c = random_case(1, 40, 2, 2, 4, 3, 6, true, 100);
  // g = logsigmoid(x) / 0.1, the strongest normaliser of gsa.md 7.3.
  std::vector<double> g = random_tensor(c.g.shape(), 101).to_double_vector();
  for (double& x : g) x = (std::min(x, 0.0) - std::log1p(std::exp(-std::abs(x)))) / 0.1;
  c.g = Tensor::from_vector<double>(g, c.g.shape());
  Tensor dout = random_tensor({1, 40, 2, 3}, 102);
  auto a = run_case(c, 0.5, dout, Tensor(), Tensor());
  GsaCase c32{c.q.to(DType::f32), c.k.to(DType::f32), c.v.to(DType::f32), c.s.to(DType::f32), c.g.to(DType::f32),
              c.Hk0.to(DType::f32), c.Hv0.to(DType::f32)};
  auto b = run_case(c32, 0.5, dout.to(DType::f32), Tensor(), Tensor());
  for (const auto& [name, t] : a) {
    INFO(name);
    for (double x : t.to_double_vector()) REQUIRE(std::isfinite(x));
    REQUIRE(rel_error(b.at(name), t) < 1e-5);
  }
}

TEST_CASE("gsa rejects inputs whose shapes or dtypes do not fit, naming the op and the shapes", "[gsa][cpu]") {
  GsaCase c = random_case(2, 5, 4, 2, 3, 2, 4, false, 110);
  GsaParams p;
  REQUIRE_THROWS_WITH(gsa_forward(c.q, c.k.narrow(3, 0, 2), c.v, c.s, c.g, Tensor(), Tensor(), p, nullptr),
                      Catch::Contains("gsa_forward") && Catch::Contains("(2, 5, 2, 2)"));
  REQUIRE_THROWS_WITH(gsa_forward(c.q.narrow(2, 0, 3), c.k, c.v, c.s, c.g, Tensor(), Tensor(), p, nullptr),
                      Catch::Contains("Hq must be a multiple of Hkv"));
  REQUIRE_THROWS_WITH(gsa_forward(c.q, c.k, c.v, c.s, c.g.narrow(3, 0, 3), Tensor(), Tensor(), p, nullptr),
                      Catch::Contains("g is (2, 5, 2, 3)"));
  REQUIRE_THROWS_WITH(gsa_forward(c.q, c.k, c.v, c.s, c.g, random_tensor({2, 2, 4, 3}, 1), random_tensor({2, 2, 4, 2}, 2),
                                  p, nullptr),
                      Catch::Contains("initial memories are (2, 2, 4, 3)") && Catch::Contains("(2, 2, 3, 4)"));
  REQUIRE_THROWS_WITH(gsa_forward(c.q, c.k, c.v, c.s.to(DType::f32), c.g, Tensor(), Tensor(), p, nullptr),
                      Catch::Contains("s and g must be f64"));
}
