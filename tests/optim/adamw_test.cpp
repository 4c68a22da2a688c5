#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "autograd/gradcheck.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/schedule.h"

using namespace hyb;

TEST_CASE("AdamW follows PyTorch's update for three steps", "[optim][adamw]") {
  Var w(random_tensor({5}, 1, DType::f32), true, "w");
  std::vector<double> p = w.data().to_double_vector(), m(5, 0), v(5, 0);
  AdamW opt({{"w", w, 0.1, 2.0}}, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  for (int t = 1; t <= 3; ++t) {
    Tensor g = random_tensor({5}, 10 + uint64_t(t), DType::f32);
    w.set_grad(g);
    opt.step(0.5);
    std::vector<double> gv = g.to_double_vector();
    const double lr = 0.01 * 0.5 * 2.0;
    for (size_t i = 0; i < 5; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * gv[i];
      v[i] = 0.95 * v[i] + 0.05 * gv[i] * gv[i];
      p[i] = p[i] - lr * 0.1 * p[i] - lr * (m[i] / (1 - std::pow(0.9, t))) / (std::sqrt(v[i] / (1 - std::pow(0.95, t))) + 1e-8);
    }
    std::vector<double> got = w.data().to_double_vector();
    for (size_t i = 0; i < 5; ++i) REQUIRE(got[i] == Approx(p[i]).epsilon(1e-5));
  }
  REQUIRE(opt.steps() == 3);
}

TEST_CASE("clipping scales the global norm down to the limit and reports the norm before", "[optim][clip]") {
  Var a(random_tensor({3}, 1, DType::f32), true), b(random_tensor({4}, 2, DType::f32), true);
  a.set_grad(Tensor::from_vector<float>({3, 0, 0}, {3}));
  b.set_grad(Tensor::from_vector<float>({0, 4, 0, 0}, {4}));
  std::vector<OptimParam> ps{{"a", a}, {"b", b}};
  REQUIRE(clip_grad_norm(ps, 1.0) == Approx(5.0));
  REQUIRE(global_grad_norm(ps) == Approx(5.0 / (5.0 + 1e-6)));
  REQUIRE(clip_grad_norm(ps, 0.0) == Approx(1.0).epsilon(1e-5));
}

TEST_CASE("clip_factor: below the limit, off, or a non-finite norm scale by 1", "[optim][clip]") {
  REQUIRE(clip_factor(5.0, 1.0) == Approx(1.0 / (5.0 + 1e-6)));
  REQUIRE(clip_factor(0.5, 1.0) == 1.0);
  REQUIRE(clip_factor(5.0, 0.0) == 1.0);
  REQUIRE(clip_factor(5.0, -1.0) == 1.0);
  REQUIRE(clip_factor(std::numeric_limits<double>::infinity(), 1.0) == 1.0);
  REQUIRE(clip_factor(std::nan(""), 1.0) == 1.0);
}

TEST_CASE("warmup_cosine reaches the peak at the end of warm-up and final_ratio at the last step", "[optim][schedule]") {
  ScheduleConfig c;
  c.total_steps = 100;
  c.warmup_steps = 10;
  c.final_ratio = 0.1;
  LrSchedule s(c);
  REQUIRE(s.factor(0) == Approx(0.1));
  REQUIRE(s.factor(9) == Approx(1.0));
  REQUIRE(s.factor(99) == Approx(0.1));
  REQUIRE(s.factor(54) == Approx(0.1 + 0.9 * (1 + std::cos(M_PI * 45.0 / 90.0)) / 2));
}

TEST_CASE("warmup_stable_decay holds the peak then decays linearly to final_ratio", "[optim][schedule]") {
  ScheduleConfig c;
  c.type = "warmup_stable_decay";
  c.total_steps = 100;
  c.warmup_steps = 5;
  c.decay_steps = 20;
  c.final_ratio = 0.0;
  LrSchedule s(c);
  REQUIRE(s.factor(79) == 1.0);
  REQUIRE(s.factor(80) == Approx(1 - 1.0 / 20));
  REQUIRE(s.factor(99) == Approx(0.0).margin(1e-12));
}

TEST_CASE("plateau cuts the multiplier after patience bad validations and respects cooldown", "[optim][schedule]") {
  ScheduleConfig c;
  c.type = "plateau";
  c.total_steps = 1000;
  c.patience = 1;
  c.factor = 0.5;
  c.cooldown = 1;
  LrSchedule s(c);
  s.on_validation(3.0);
  s.on_validation(3.0);
  REQUIRE(s.factor(10) == 1.0);
  s.on_validation(3.0);  // second bad: bad = 2 > patience
  REQUIRE(s.factor(10) == 0.5);
  s.on_validation(3.0);  // cooldown swallows this one
  REQUIRE(s.factor(10) == 0.5);
  s.on_validation(3.0);
  s.on_validation(3.0);
  REQUIRE(s.factor(10) == 0.25);
}
