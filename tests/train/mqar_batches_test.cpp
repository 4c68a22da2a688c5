#include <catch2/catch.hpp>

#include "train/mqar_batches.h"

using namespace hyb;

namespace {

MqarConfig two_segments(std::optional<int64_t> fixed) {
  MqarConfig c;
  c.vocab = 128;
  c.segments = {{16, 2, std::nullopt}, {32, 4, std::nullopt}};
  c.train_examples = fixed;
  return c;
}

std::vector<double> rows(const Tensor& t) { return t.to_double_vector(); }

}  // namespace

TEST_CASE("mqar training batches alternate segments, split into ranks and micro-batches, and resume exactly", "[train][mqar]") {
  MqarBatches one(two_segments(std::nullopt), 4, 2, 9, 0, 1);
  std::vector<std::vector<double>> steps;
  for (int s = 0; s < 4; ++s) {
    Tensor a, b, ta, tb;
    one.next(&a, &ta);
    one.next(&b, &tb);
    CHECK(a.shape() == Shape{2, s % 2 ? 32 : 16});  // step s: segment s mod 2
    std::vector<double> all = rows(a), second = rows(b);
    all.insert(all.end(), second.begin(), second.end());
    steps.push_back(all);
    if (s == 1) {
      // Resuming from the cursor after step 2 continues with the same examples.
      const nlohmann::json cursor = one.cursor();
      MqarBatches again(two_segments(std::nullopt), 4, 2, 9, 0, 1);
      again.restore(cursor);
      Tensor x, y;
      again.next(&x, &y);
      MqarBatches probe = one;
      Tensor p, q;
      probe.next(&p, &q);
      CHECK(rows(x) == rows(p));
    }
  }
  CHECK(steps[0] != steps[2]);  // fresh examples every step

  // Two ranks together see the one-rank batch.
  MqarBatches r0(two_segments(std::nullopt), 4, 1, 9, 0, 2), r1(two_segments(std::nullopt), 4, 1, 9, 1, 2);
  Tensor a, b, t;
  r0.next(&a, &t);
  r1.next(&b, &t);
  std::vector<double> joined = rows(a), tail = rows(b);
  joined.insert(joined.end(), tail.begin(), tail.end());
  CHECK(joined == steps[0]);
}

TEST_CASE("mqar training batches cycle a fixed set of train_examples per segment", "[train][mqar]") {
  // K = 6 examples per segment, batch 4: segment 0 is trained at steps 0, 2, 4 on rows 0-3, 4,5,0,1, 2-5.
  MqarBatches fixed(two_segments(6), 4, 1, 9, 0, 1);
  std::vector<std::vector<double>> seg0;
  for (int s = 0; s < 6; ++s) {
    Tensor x, y;
    fixed.next(&x, &y);
    if (s % 2 == 0) seg0.push_back(rows(x));
  }
  const int64_t T = 16;
  auto row = [&](int step, int r) { return std::vector<double>(seg0[step].begin() + r * T, seg0[step].begin() + (r + 1) * T); };
  CHECK(row(1, 2) == row(0, 0));
  CHECK(row(1, 3) == row(0, 1));
  CHECK(row(2, 0) == row(0, 2));
  CHECK(row(2, 3) == row(1, 1));
  CHECK(row(1, 0) != row(0, 0));
}
