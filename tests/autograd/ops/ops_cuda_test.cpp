#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "autograd/gradcheck.h"
#include "autograd/ops/binary.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/ops_test_util.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/softmax.h"
#include "autograd/ops/unary.h"
#include "parity.h"

using namespace hyb;
using hyb::test::apply_binary;

namespace {

// Inputs are drawn on the bf16 grid, so the bf16 run starts from exactly the reference's values and
// the comparison measures the kernels, not the rounding of their inputs (which exp, softplus or gelu
// at |x| ~ 10 amplify past any useful tolerance).
Tensor on_bf16_grid(const Tensor& t) { return t.to(DType::bf16).to(DType::f64); }

void require_parity(const ParityFn& fn, const std::vector<Tensor>& inputs, const ParityOptions& opt = {}) {
  std::vector<Tensor> exact;
  for (const Tensor& t : inputs) exact.push_back(on_bf16_grid(t));
  ParityResult r = cuda_parity(fn, exact, opt);
  INFO(r.report);
  REQUIRE(r.ok);
}

struct UnaryCase {
  const char* name;
  std::function<Var(const Var&)> op;
  double mean, std;  // input distribution: log needs positive inputs, softplus some above 20
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"silu", [](const Var& x) { return silu(x); }, 0, 3},
      {"gelu", [](const Var& x) { return gelu(x); }, 0, 3},
      {"gelu_tanh", [](const Var& x) { return gelu_tanh(x); }, 0, 3},
      {"sigmoid", [](const Var& x) { return sigmoid(x); }, 0, 3},
      {"softplus", [](const Var& x) { return softplus(x); }, 0, 12},
      {"logsigmoid", [](const Var& x) { return logsigmoid(x); }, 0, 5},
      {"exp", [](const Var& x) { return exp(x); }, 0, 2},
      {"relu", [](const Var& x) { return relu(x); }, 0, 1},
      {"log", [](const Var& x) { return log(x); }, 3, 0.7},
      {"neg", [](const Var& x) { return neg(x); }, 0, 1},
      {"add_scalar", [](const Var& x) { return add_scalar(x, 0.37); }, 0, 1},
      {"mul_scalar", [](const Var& x) { return mul_scalar(x, -1.7); }, 0, 1},
  };
}

// div's b stays away from 0 (5 sigma), so no quotient is dominated by one rounding of b.
Tensor operand_b(BinaryOp op, const Shape& s, uint64_t seed) {
  return op == BinaryOp::div ? random_tensor(s, seed, DType::f64, 0.4, 2.0) : random_tensor(s, seed);
}

const BinaryOp kBinaryOps[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div};

}  // namespace

TEST_CASE("pointwise ops on cuda match the cpu reference, contiguous, unaligned and transposed", "[unary][gpu]") {
  for (const UnaryCase& c : unary_cases()) {
    for (int64_t n : {1, 129, 1000, 4099}) {
      DYNAMIC_SECTION(c.name << " (" << n << ")") {
        require_parity([&](const std::vector<Var>& x) { return std::vector<Var>{c.op(x[0])}; },
                       {random_tensor({n}, 1, DType::f64, c.std, c.mean)});
      }
    }
    DYNAMIC_SECTION(c.name << " of a view starting one element in (no 16-byte packs)") {
      require_parity([&](const std::vector<Var>& x) { return std::vector<Var>{c.op(narrow(x[0], 0, 1, 1000))}; },
                     {random_tensor({1001}, 2, DType::f64, c.std, c.mean)});
    }
    DYNAMIC_SECTION(c.name << " transposed (65, 37)") {
      require_parity([&](const std::vector<Var>& x) { return std::vector<Var>{c.op(transpose(x[0], 0, 1))}; },
                     {random_tensor({37, 65}, 3, DType::f64, c.std, c.mean)});
    }
  }
}

// Wide inputs (sigma 6) reach the tails, where normcdff and the CPU's erfc must agree on saturation.
TEST_CASE("gelu on cuda matches the cpu reference into both tails, rows of 37 and 256", "[gelu][gpu]") {
  for (int64_t C : {37, 256}) {
    DYNAMIC_SECTION("(129, " << C << ")") {
      require_parity([](const std::vector<Var>& x) { return std::vector<Var>{gelu(x[0])}; },
                     {random_tensor({129, C}, 4, DType::f64, 6.0)});
    }
  }
  SECTION("transposed (37, 65)") {
    require_parity([](const std::vector<Var>& x) { return std::vector<Var>{gelu(transpose(x[0], 0, 1))}; },
                   {random_tensor({65, 37}, 5, DType::f64, 6.0)});
  }
}

TEST_CASE("gelu on cuda saturates to x and 0 with slopes 1 and 0 far out", "[gelu][gpu]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    DYNAMIC_SECTION(dtype_name(dt)) {
      const Device cuda = Device::cuda(0);
      Var x(Tensor::from_vector<double>({-100.0, -30.0, 30.0, 100.0}, {4}).to(dt).to(cuda), true);
      Var y = gelu(x);
      backward(y, Tensor::full({4}, 1.0, dt, cuda));
      REQUIRE(y.data().to(Device::cpu()).to_double_vector() == std::vector<double>{0.0, 0.0, 30.0, 100.0});
      REQUIRE(x.grad().to(Device::cpu()).to_double_vector() == std::vector<double>{0.0, 0.0, 1.0, 1.0});
    }
  }
}

TEST_CASE("broadcasting binary ops on cuda match the cpu reference, both gradients included", "[binary][gpu]") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 1, 5}, {4, 5}},   {{129}, {129}},          {{1000}, {1}},          {{}, {7, 3}},
      {{37, 1000}, {1000}},  {{37, 64}, {37, 1}},     {{4, 1, 3}, {4, 2, 1}}, {{129, 1}, {1, 257}},
      {{2, 3, 4, 5, 6}, {3, 1, 5, 1}},
  };
  for (BinaryOp op : kBinaryOps) {
    for (const auto& [sa, sb] : shapes) {
      // A gradient summed into one element from N(0, 1) upstream gradients, which the bf16 run rounds
      // first, can cancel to any size: its relative error has no bound, so one-element operands are
      // compared in f32 only (the other shapes cover the bf16 broadcast sums).
      ParityOptions opt;
      opt.bf16 = shape_numel(sa) > 1 && shape_numel(sb) > 1;
      DYNAMIC_SECTION(binary_name(op) << " " << shape_str(sa) << " with " << shape_str(sb)) {
        require_parity([&](const std::vector<Var>& x) { return std::vector<Var>{apply_binary(op, x[0], x[1])}; },
                       {random_tensor(sa, 11), operand_b(op, sb, 12)}, opt);
      }
    }
    DYNAMIC_SECTION(binary_name(op) << " of a transposed a with a broadcast row b") {
      require_parity(
          [&](const std::vector<Var>& x) { return std::vector<Var>{apply_binary(op, transpose(x[0], 0, 1), x[1])}; },
          {random_tensor({5, 3}, 13), operand_b(op, {1, 5}, 14)});
    }
    DYNAMIC_SECTION(binary_name(op) << " of an unaligned narrow a with a transposed b") {
      require_parity(
          [&](const std::vector<Var>& x) {
            return std::vector<Var>{apply_binary(op, narrow(x[0], 1, 1, 33), transpose(x[1], 0, 1))};
          },
          {random_tensor({9, 34}, 15), operand_b(op, {33, 9}, 16)});
    }
  }
}

TEST_CASE("sum and mean on cuda match the cpu reference over rows, columns and split reductions", "[reduce][gpu]") {
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
    bool keepdim;
    bool transposed;  // reduce transpose(x, 0, 1) instead of x
  };
  const std::vector<Case> cases = {
      {{1000}, {}, false, false},          // one warp row
      {{129, 33}, {1}, false, false},      // warp rows
      {{129, 33}, {0}, true, false},       // columns
      {{3, 4, 5}, {0, 2}, true, false},    // rows over two unmerged dims
      {{3, 4, 5}, {1}, false, false},      // columns over two unmerged kept dims
      {{2, 5000}, {-1}, false, false},     // block rows, 16-byte packs
      {{3, 70001}, {-1}, true, false},     // block rows split into chunks, odd length
      {{40000, 3}, {0}, false, false},     // columns split into chunks
      {{300, 64}, {0}, false, false},      // columns in 16-byte packs
      {{20000, 16}, {0}, true, false},     // packed columns split into chunks
      {{300, 1000}, {}, false, false},     // everything, split
      {{7, 9, 11}, {0, 1}, true, false},   // leading dims
      {{33, 129}, {1}, false, true},       // transposed: the reduced dim is strided
      {{33, 129}, {0}, true, true},        // transposed: rows with stride 129
      {{1}, {0}, false, false},            // nothing to add
  };
  for (const Case& c : cases) {
    for (bool is_mean : {false, true}) {
      DYNAMIC_SECTION((is_mean ? "mean " : "sum ") << shape_str(c.shape) << (c.transposed ? " transposed" : "")
                                                   << " over dims " << shape_str(c.dims) << " keepdim " << c.keepdim) {
        require_parity(
            [&](const std::vector<Var>& x) {
              Var v = c.transposed ? transpose(x[0], 0, 1) : x[0];
              return std::vector<Var>{is_mean ? mean(v, c.dims, c.keepdim) : sum(v, c.dims, c.keepdim)};
            },
            {random_tensor(c.shape, 21, DType::f64, 1.0, 0.5)});
      }
    }
  }
}

TEST_CASE("a split cuda sum gives the same bits on every run", "[reduce][gpu]") {
  Tensor x = random_tensor({3, 70001}, 22, DType::f32).to(Device::cuda(0));
  Tensor c = random_tensor({40000, 3}, 23, DType::f32).to(Device::cuda(0));
  const std::vector<double> rows = sum_forward(x, {-1}, false).to_double_vector();
  const std::vector<double> cols = sum_forward(c, {0}, false).to_double_vector();
  for (int run = 0; run < 3; ++run) {
    REQUIRE(sum_forward(x, {-1}, false).to_double_vector() == rows);
    REQUIRE(sum_forward(c, {0}, false).to_double_vector() == cols);
  }
}

TEST_CASE("softmax, log_softmax and logsumexp on cuda match the cpu reference from 1 to 70000 columns",
          "[softmax][gpu]") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {37, 1}, {37, 7}, {37, 129}, {19, 512}, {19, 513}, {11, 1000}, {5, 1024}, {5, 4099}, {3, 50304}, {2, 70000}};
  for (const auto& [rows, V] : shapes) {
    Tensor x = random_tensor({rows, V}, 31, DType::f64, 2.0);
    DYNAMIC_SECTION("softmax (" << rows << ", " << V << ")") {
      require_parity([](const std::vector<Var>& v) { return std::vector<Var>{softmax(v[0])}; }, {x});
    }
    DYNAMIC_SECTION("log_softmax (" << rows << ", " << V << ")") {
      require_parity([](const std::vector<Var>& v) { return std::vector<Var>{log_softmax(v[0])}; }, {x});
    }
    DYNAMIC_SECTION("logsumexp (" << rows << ", " << V << ")") {
      require_parity([](const std::vector<Var>& v) { return std::vector<Var>{logsumexp(v[0], false)}; }, {x});
    }
  }
  for (int64_t V : {33, 600}) {
    DYNAMIC_SECTION("transposed inputs with " << V << " columns, logsumexp keepdim") {
      require_parity(
          [](const std::vector<Var>& v) {
            Var xt = transpose(v[0], 0, 1);
            return std::vector<Var>{softmax(xt), log_softmax(xt), logsumexp(xt, true)};
          },
          {random_tensor({V, 20}, 32, DType::f64, 2.0)});
    }
  }
}

TEST_CASE("cuda logsumexp of an all -inf row is -inf with zero gradient; a +inf entry gives +inf", "[softmax][gpu]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t V : {3, 600}) {  // a warp row and a block row
    DYNAMIC_SECTION("rows of " << V) {
      std::vector<double> v(size_t(3 * V), -inf);
      for (int64_t j = 0; j < V; ++j) v[size_t(V + j)] = 0.01 * double(j) - 1.0;
      v[size_t(2 * V + 1)] = inf;
      Var x(Tensor::from_vector<double>(v, {3, V}).to(DType::f32).to(Device::cuda(0)), true);
      Var l = logsumexp(x);
      const std::vector<double> lv = l.data().to_double_vector();
      REQUIRE(lv[0] == -inf);
      REQUIRE(std::isfinite(lv[1]));
      REQUIRE(lv[2] == inf);
      backward(l, Tensor::from_vector<double>({0.3, 0.7, 0.2}, {3}).to(DType::f32).to(Device::cuda(0)));
      const std::vector<double> g = x.grad().to_double_vector();
      double row1 = 0;
      for (int64_t j = 0; j < V; ++j) {
        REQUIRE(g[size_t(j)] == 0.0);
        row1 += g[size_t(V + j)];
      }
      REQUIRE(row1 == Approx(0.7).epsilon(1e-5));
    }
  }
}

TEST_CASE("dropout on cuda matches the cpu reference, output and gradient", "[dropout][gpu]") {
  for (uint64_t offset : {uint64_t(0), uint64_t(5)}) {
    DYNAMIC_SECTION("offset " << offset) {
      require_parity(
          [&](const std::vector<Var>& x) {
            return std::vector<Var>{dropout(x[0], 0.3, 17, "test.cuda.dropout", offset, true),
                                    dropout(transpose(x[1], 0, 1), 0.5, 17, "test.cuda.dropout", offset, true)};
          },
          {random_tensor({1001}, 41), random_tensor({37, 129}, 42)});
    }
  }
}

TEST_CASE("cpu and cuda dropout drop the same elements for the same seed, name and offset", "[dropout][gpu]") {
  Tensor x = random_tensor({3, 1001}, 43, DType::f32, 1.0, 3.0);
  // Offsets aligned and not to a Philox block, and one whose words cross 2^34 (the counter's high word).
  for (uint64_t offset : {uint64_t(0), uint64_t(6), (uint64_t(1) << 34) - 3}) {
    DYNAMIC_SECTION("offset " << offset) {
      const DropoutParams d = dropout_params(0.3, 11, "test.cuda.mask", offset);
      for (bool transposed : {false, true}) {
        Tensor in = transposed ? x.transpose(0, 1) : x;
        const std::vector<double> cpu = dropout_forward(in, d).to_double_vector();
        // f32 on both sides is one IEEE multiply per element: equal bits, not a tolerance.
        REQUIRE(dropout_forward(in.to(Device::cuda(0)), d).to_double_vector() == cpu);
        const std::vector<double> gpu16 = dropout_forward(in.to(DType::bf16).to(Device::cuda(0)), d).to_double_vector();
        for (size_t i = 0; i < cpu.size(); ++i) REQUIRE((gpu16[i] != 0.0) == (cpu[i] != 0.0));
      }
    }
  }
}
