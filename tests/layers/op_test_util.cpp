#include "layers/op_test_util.h"

#include <catch2/catch.hpp>

#include "autograd/ops/cast.h"
#include "autograd/tape.h"
#include "compare.h"
#include "core/rng.h"

namespace hyb {

Tensor uniform_tensor(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_uniform(t, seed, "test.uniform", lo, hi);
  return t;
}

Var state_dtype(const Var& x, const Var& like) { return like.dtype() == DType::bf16 ? cast(x, DType::f32) : x; }

Tensor to_f32(const Tensor& t) { return t.defined() ? t.to(DType::f32) : Tensor(); }

void backward_with_final_state(const Var& o, const Tensor& dout, const Var& final_state, const Tensor& dfinal) {
  std::vector<Var> roots{o};
  std::vector<Tensor> droots{dout};
  if (dfinal.defined()) {
    roots.push_back(final_state);
    droots.push_back(dfinal);
  }
  backward(roots, droots);
}

void require_outputs_match(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& ref, double tol) {
  REQUIRE(got.size() == ref.size());
  for (const auto& [name, t] : ref) {
    INFO(name);
    REQUIRE(rel_error(got.at(name), t) < tol);
  }
}

void require_golden_outputs(const SafetensorsFile& f, const std::map<std::string, Tensor>& got,
                            const std::vector<std::string>& inputs) {
  REQUIRE(rel_error(got.at("o"), f.get("out.o")) < 1e-12);
  REQUIRE(rel_error(got.at("final_state"), f.get("out.final_state")) < 1e-12);
  for (const std::string& in : inputs) REQUIRE(rel_error(got.at("d" + in), f.get("grad_in." + in)) < 1e-12);
}

void check_close_if_defined(const char* what, const Tensor& x, const Tensor& want, double tol) {
  INFO(what);
  REQUIRE(x.defined() == want.defined());
  if (want.defined()) CHECK(rel_error(x.to(DType::f64), want) < tol);
}

}  // namespace hyb
