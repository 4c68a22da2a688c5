// The golden-op table: one function and one table line per op family (golden_ops.h).
#include "golden_ops.h"

#include <iterator>

#include "autograd/ops/cast.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"
#include "layers/gsa/gsa_op.h"
#include "layers/nha/nha_op.h"
#include "layers/mamba2/simple_gla_op.h"
#include "layers/softmax_attention/attention_op.h"

namespace hyb {

const Var& GoldenCase::input(const std::string& name) const {
  auto it = inputs.find(name);
  HYB_CHECK(it != inputs.end(), file.path, ": no input tensor in.", name);
  return it->second;
}

const std::string& GoldenCase::meta(const std::string& key) const {
  auto it = file.metadata.find(key);
  HYB_CHECK(it != file.metadata.end(), file.path, ": __metadata__ has no key ", key);
  return it->second;
}

double GoldenCase::meta_double(const std::string& key) const {
  const std::string& s = meta(key);
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(str_cat(file.path, ": __metadata__.", key, ": expected a number, got \"", s, "\""));
}

int64_t GoldenCase::meta_int(const std::string& key) const {
  const std::string& s = meta(key);
  try {
    size_t used = 0;
    long long v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(str_cat(file.path, ": __metadata__.", key, ": expected an integer, got \"", s, "\""));
}

namespace {

// Decays, beta and states stay f32 under bf16 activations (mamba2.md 2.4, gated_deltanet.md 2.5).
Var state_input(const GoldenCase& c, const std::string& name) {
  const Var& x = c.input(name);
  return x.dtype() == DType::bf16 ? cast(x, DType::f32) : x;
}

// Masked-softmax attention (README "attention"): causal, window counting the current token.
GoldenOutputs golden_attention(const GoldenCase& c) {
  AttentionParams p;
  p.scale = c.meta_double("scale");
  p.window = c.meta_int("window");
  return {{"o", attention(c.input("q"), c.input("k"), c.input("v"), p)}};
}

// The SSD core (README "simple_gla"): scalar decay per head, zero initial state.
GoldenOutputs golden_simple_gla(const GoldenCase& c) {
  SimpleGlaParams p;
  p.scale = c.meta_double("scale");
  SimpleGlaVars r = simple_gla(c.input("q"), c.input("k"), c.input("v"), state_input(c, "g"), Var(), p);
  return {{"o", r.o}, {"final_state", r.final_state}};
}

// The gated delta rule (README "gated_delta_rule"): q and k already unit-norm, zero initial state.
GoldenOutputs golden_gated_delta_rule(const GoldenCase& c) {
  GatedDeltaParams p;
  p.scale = c.meta_double("scale");
  GatedDeltaVars r = gated_delta_rule(c.input("q"), c.input("k"), c.input("v"), state_input(c, "beta"),
                                      state_input(c, "g"), Var(), p);
  return {{"o", r.o}, {"final_state", r.final_state}};
}

// Gated Slot Attention (README "gsa"): two gated passes over M slots, zero initial memories. s and g
// stay f32 under bf16 activations (gsa.md 4.5).
GoldenOutputs golden_gsa(const GoldenCase& c) {
  GsaParams p;
  p.scale = c.meta_double("scale");
  GsaVars r = gsa(c.input("q"), c.input("k"), c.input("v"), state_input(c, "s"), state_input(c, "g"), Var(), Var(), p);
  return {{"o", r.o}, {"final_state0", r.Hk}, {"final_state1", r.Hv}};
}

// Native Hybrid Attention (README "nha"): token shift = window, RoPE inside the op on the window only.
GoldenOutputs golden_nha(const GoldenCase& c) {
  NhaParams p;
  p.scale = c.meta_double("scale");
  p.window = c.meta_int("window");
  p.shift = c.meta_int("token_shift");
  p.rope_theta = c.meta_double("rope_theta");
  p.rope_offset = c.meta_int("rope_offset");
  HYB_CHECK(c.meta("rope_style") == "rotate_half", c.file.path, ": rope_style ", c.meta("rope_style"),
            " is not the op's rotate_half");
  NhaVars r = nha(c.input("q"), c.input("k"), c.input("v"), state_input(c, "s"), state_input(c, "g"), Var(), Var(), Var(),
                  p);
  return {{"o", r.o}, {"final_state0", r.HK}, {"final_state1", r.HV}};
}

const GoldenOp kGoldenOps[] = {
    {"attention", golden_attention},
    {"simple_gla", golden_simple_gla},
    {"gated_delta_rule", golden_gated_delta_rule},
    {"gsa", golden_gsa},
    {"nha", golden_nha},
};

}  // namespace

const GoldenOp* find_golden_op(const std::string& name) {
  for (const GoldenOp& op : kGoldenOps)
    if (name == op.name) return &op;
  return nullptr;
}

}  // namespace hyb
