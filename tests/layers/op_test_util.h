// What the op tests of the recurrent families (gated delta rule, simple_gla, gsa, nha) share: inputs
// drawn uniformly, the f32 state inputs of a bf16 run, and the checks of one result against another.
//   Tensor g = uniform_tensor({B, T, H}, 4, -0.6, -0.02);
//   require_outputs_match(got, ref, 1e-12);
#pragma once
#include <map>
#include <string>
#include <vector>

#include "autograd/var.h"
#include "core/safetensors.h"
#include "core/tensor.h"

namespace hyb {

// The params of a chunked op (GatedDeltaParams, SimpleGlaParams): scale and chunk size (0: recurrent).
template <class Params>
Params chunk_params(double scale, int64_t chunk) {
  Params p;
  p.scale = scale;
  p.chunk_size = chunk;
  return p;
}

// Uniform in [lo, hi], Philox stream "test.uniform".
Tensor uniform_tensor(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype = DType::f64);

// Gates, decays, write weights and states stay f32 when the activations (like) are bf16.
Var state_dtype(const Var& x, const Var& like);

// t in f32, or undefined where t is.
Tensor to_f32(const Tensor& t);

// Backward from o with dout, and from final_state with dfinal where dfinal is defined.
void backward_with_final_state(const Var& o, const Tensor& dout, const Var& final_state, const Tensor& dfinal);

// The same names in both, each relative error < tol.
void require_outputs_match(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& ref, double tol);

// The golden file's out.o, out.final_state and grad_in.<input> against got's o, final_state and d<input>:
// relative error < 1e-12.
void require_golden_outputs(const SafetensorsFile& f, const std::map<std::string, Tensor>& got,
                            const std::vector<std::string>& inputs);

// x (any float dtype) against want (f64): both defined or both not, relative error < tol (a CHECK).
void check_close_if_defined(const char* what, const Tensor& x, const Tensor& want, double tol);

// A chunked op's results against its reference (the Outputs and Grads of gated_delta_rule or
// simple_gla): o, final_state and the gradients of q, k, v, g and S0, through check_close_if_defined.
template <class Outputs, class Grads>
void check_state_op_close(const Outputs& got, const Grads& got_g, const Outputs& ref, const Grads& ref_g, double tol) {
  check_close_if_defined("o", got.o, ref.o, tol);
  check_close_if_defined("final_state", got.final_state, ref.final_state, tol);
  check_close_if_defined("dq", got_g.dq, ref_g.dq, tol);
  check_close_if_defined("dk", got_g.dk, ref_g.dk, tol);
  check_close_if_defined("dv", got_g.dv, ref_g.dv, tol);
  check_close_if_defined("dg", got_g.dg, ref_g.dg, tol);
  check_close_if_defined("dS0", got_g.dS0, ref_g.dS0, tol);
}

}  // namespace hyb
