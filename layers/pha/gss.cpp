#include "layers/pha/gss.h"

#include <cmath>
#include <numbers>

#include "autograd/ops/binary.h"
#include "autograd/ops/cast.h"
#include "autograd/ops/unary.h"
#include "core/rng.h"
#include "layers/pha/dss_op.h"

namespace hyb {

namespace {

// S4D-Lin (pha.md 4.3): per mode n a step Delta_n = exp(U(ln 1e-3, ln 1e-1)), Lambda_real = ln(Delta_n / 2)
// and omega_n = pi n Delta_n. Both parameters draw Delta from the one stream named after Lambda_real, so
// they agree whatever order they are initialized in.
Tensor s4d_steps(const Tensor& like, uint64_t seed, const std::string& lambda_real_name) {
  Tensor u = Tensor::empty(like.shape(), DType::f64);
  fill_uniform(u, seed, lambda_real_name + ".delta", std::log(1e-3), std::log(1e-1));
  return u;
}

std::string sibling(const std::string& full_name, const std::string& name) {
  return full_name.substr(0, full_name.rfind('.') + 1) + name;
}

ParamInit s4d_lambda_real() {
  return ParamInit::custom([](const Tensor& t, uint64_t seed, const std::string& full) {
    Tensor u = s4d_steps(t, seed, full);
    for (int64_t n = 0; n < u.numel(); ++n) u.data<double>()[n] = std::log(0.5 * std::exp(u.data<double>()[n]));
    t.copy_(u.to(t.dtype()));
  });
}

ParamInit s4d_lambda_imag() {
  return ParamInit::custom([](const Tensor& t, uint64_t seed, const std::string& full) {
    Tensor u = s4d_steps(t, seed, sibling(full, "Lambda_real"));
    for (int64_t n = 0; n < u.numel(); ++n)
      u.data<double>()[n] = std::numbers::pi * double(n) * std::exp(u.data<double>()[n]);
    t.copy_(u.to(t.dtype()));
  });
}

// The DSS path runs in fp32 at least (pha.md 4.5 step 6): sums over a thousand taps that cancel
// need more than bf16's 8 bits.
DType dss_dtype(DType compute) { return compute == DType::bf16 ? DType::f32 : compute; }

}  // namespace

Dss::Dss(const GssConfig& cfg) : cfg_(cfg) {
  const int64_t Hs = cfg.dss_dim, Ns = cfg.dss_state;
  norm_ = register_module("norm", std::make_unique<LayerNorm>(Hs, cfg.layernorm_eps));
  const ParamInit unit = ParamInit::normal(1.0);
  lambda_re_ = register_parameter("Lambda_real", {Ns}, cfg.s4d_lin_init ? s4d_lambda_real() : unit, false);
  lambda_im_ = register_parameter("Lambda_imag", {Ns}, cfg.s4d_lin_init ? s4d_lambda_imag() : unit, false);
  c_re_ = register_parameter("C_real", {Hs, Ns}, unit, false);
  c_im_ = register_parameter("C_imag", {Hs, Ns}, unit, false);
  d_ = register_parameter("param_D", {Hs}, unit, false);
}

Var Dss::forward(const Var& v) const {
  return dss_conv(norm_->forward(v), lambda_re_, lambda_im_, c_re_, c_im_, d_, cfg_.lambda_imag_exp);
}

DssDecodeState Dss::start_decode(int64_t batch, DType state_dtype, Device device) const {
  return dss_decode_start(batch, lambda_re_.data(), lambda_im_.data(), c_re_.data(), c_im_.data(),
                          cfg_.lambda_imag_exp, state_dtype, device);
}

Var Dss::decode(const Var& v, DssDecodeState& st) const {
  const DType dt = st.s_re.dtype();
  return Var(dss_decode_step(norm_->forward(v).data(), d_.data().to(dt), st));
}

Gss::Gss(const GssConfig& cfg, double init_std, double residual_std) {
  const int64_t d = cfg.d_model, F = cfg.wide, Hs = cfg.dss_dim;
  const ParamInit w = ParamInit::normal(init_std);
  to_u_ = register_module("to_u", std::make_unique<Linear>(d, F, false, w));
  to_v_ = register_module("to_v", std::make_unique<Linear>(d, Hs, false, w));
  dss_ = register_module("dss", std::make_unique<Dss>(cfg));
  to_gate_ = register_module("to_gate", std::make_unique<Linear>(Hs, F, false, w));
  to_out_ = register_module("to_out", std::make_unique<Linear>(F, d, true, ParamInit::normal(residual_std)));
}

Var Gss::gate_and_project(const Var& u, const Var& y, DType compute) const {
  return to_out_->forward(mul(to_gate_->forward(cast(y, compute)), u));
}

Var Gss::forward(const Var& x) const {
  const Var u = gelu(to_u_->forward(x));
  const Var y = dss_->forward(cast(gelu(to_v_->forward(x)), dss_dtype(x.dtype())));
  return gate_and_project(u, y, x.dtype());
}

DssDecodeState Gss::start_decode(int64_t batch, Device device, DType compute) const {
  return dss_->start_decode(batch, dss_dtype(compute), device);
}

Var Gss::decode(const Var& x, DssDecodeState& st) const {
  const Var u = gelu(to_u_->forward(x));
  const Var y = dss_->decode(cast(gelu(to_v_->forward(x)), st.s_re.dtype()), st);
  return gate_and_project(u, y, x.dtype());
}

}  // namespace hyb
