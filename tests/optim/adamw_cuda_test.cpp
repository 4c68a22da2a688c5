#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "optim/adamw.h"

using namespace hyb;

TEST_CASE("AdamW on cuda updates every parameter as the cpu does, in one launch", "[optim][adamw][gpu]") {
  // Whole 4096-element chunks take float4 loads, the rest of a tensor scalar ones; 30 small tensors
  // make blocks' chunk ranges cross many tensor boundaries.
  std::vector<Shape> shapes{{7}, {129, 65}, {4096 + 3}, {1}, {1024}, {3, 4104}, {50001}, {8192}};
  for (int i = 0; i < 30; ++i) shapes.push_back({(i * 37) % 300 + 1});
  std::vector<OptimParam> cpu, gpu;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor w = random_tensor(shapes[i], 10 + i, DType::f32);
    cpu.push_back({str_cat("p", i), Var(w.clone(), true), 0.1 * double(i % 4), 1.0 + double(i % 4)});
    gpu.push_back({str_cat("p", i), Var(w.to(Device::cuda(0)), true), 0.1 * double(i % 4), 1.0 + double(i % 4)});
  }
  AdamW a(cpu, {.lr = 1e-2}), b(gpu, {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor g = random_tensor(shapes[i], 100 + uint64_t(step) * 10 + i, DType::f32);
      cpu[i].var.set_grad(g.clone());
      gpu[i].var.set_grad(g.to(Device::cuda(0)));
    }
    a.step(0.7);
    b.step(0.7);
  }
  for (size_t i = 0; i < shapes.size(); ++i) REQUIRE(rel_error(gpu[i].var.data(), cpu[i].var.data()) < 1e-6);
}
