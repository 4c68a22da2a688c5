// What the mixer tests of every layer family share: a mixer object resolved by its family's own
// rules (as the config loader does), the construction context, parameters redrawn at random, and the
// model-level decoding check (a small f64 CausalLM mixing the family with attention decodes token by
// token, after prefills of 1 and 6, to the parallel forward's logits).
//   json m = resolve_test_mixer("gsa", {{"num_slots", 3}}, {.d_model = 8});
//   GsaMixer layer(gsa_config_from_json(m), test_mixer_context({.d_model = 8}));
//   randomize_parameters(layer, 2);
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "layers/mixer.h"
#include "layers/model/causal_lm.h"

namespace hyb {

struct MixerTestShape {
  int64_t d_model = 8;
  int64_t max_seq_len = 64;
  int64_t num_layers = 1;
  double init_std = 0.02;
  nlohmann::json blocks = nullptr;  // model.blocks, for families that take sizes from `T` and `M` (config.md 3.3)
};

nlohmann::json resolve_test_mixer(const std::string& type, const nlohmann::json& written, const MixerTestShape& shape);
// The ConfigKeyError message resolve throws, or "" when it resolves.
std::string config_error(const std::function<void()>& resolve);
MixerContext test_mixer_context(const MixerTestShape& shape, const std::string& init = "family", bool has_mlp = true);
// Every parameter N(0, sd), by name (Philox), so the same values land on any device and dtype.
void randomize_parameters(Module& m, uint64_t seed, double sd = 0.5);

// Every parameter of the layer and its input x against f64 central differences (gradcheck_leaves),
// max relative error < 1e-6; build the layer under ParameterScope(cpu, f64).
void require_mixer_gradcheck(Mixer& layer, const Var& x);
// The same for any module whose output is forward(x) (a block, a mixer).
void require_module_gradcheck(const Module& m, const Var& x, const std::function<Var(const Var&)>& forward);

// For every variant (a section each): the layer built by make (mixer, d_model) under ParameterScope(cpu,
// f64), initialised (seed 1) and redrawn (seed 2), through require_mixer_gradcheck on x (1, T, d_model).
void require_mixer_gradchecks(const std::vector<std::pair<std::string, nlohmann::json>>& variants, int64_t d_model, int64_t T,
                              const std::function<std::unique_ptr<Mixer>(const nlohmann::json& mixer, int64_t d_model)>& make);

// What require_cuda_mixer_matches_cpu draws and accepts per activation dtype. Parameters are N(0, sd):
// smaller for bf16, because at 0.5 the layer is so ill-conditioned that rounding only the inputs and
// parameters to bf16 moves the exact f64 gradients by up to 30% (measured on the CPU for the Mamba2
// mixer), which no bf16 kernel can beat; at 0.1 that sensitivity is about 1%. Tolerances: f32 is
// chunked fp32 against the f64 recurrence through the whole layer; bf16 is bf16 GEMMs and activations
// with fp32 accumulation. The decay parameter's gradient (d A_log) is a sum over every token whose
// terms largely cancel, so its relative error is several times the others': with the per-chunk SSD
// states in bf16 (mamba2.md 4.5 item 3) Mamba2's measured 3.05e-2 on the H100 (2026-11-27; every
// other gradient <= 1.1e-2).
struct MixerParityOptions {
  double tol_f32 = 1e-4, tol_bf16 = 4e-2;
  double sd_f32 = 0.5, sd_bf16 = 0.1;
};

// For every variant and activations f32 and bf16: the mixer built by make on cuda (f32 master
// parameters) against the same mixer on the CPU in f64 (d_model 16, B 2, T 70): output, input gradient
// and every parameter gradient, relative error below the option's tolerance. make is called under the
// ParameterScope of each side; the layer is initialised (seed 1) and its parameters redrawn (seed 2).
void require_cuda_mixer_matches_cpu(const std::vector<std::pair<std::string, nlohmann::json>>& variants,
                                    const std::function<std::unique_ptr<Mixer>(const nlohmann::json& mixer, int64_t d_model)>& make,
                                    const MixerParityOptions& options = {});

// What require_mixer_decode_matches_forward decodes and requires.
struct MixerDecodeCheck {
  Device device = Device::cpu();
  DType dtype = DType::f64;  // of the parameters (the layer's ParameterScope), x and the state
  int64_t d_model = 8;
  int64_t T = 23;
  std::vector<int64_t> prefills;  // parallel prefill lengths; 0 decodes from the first token
  double tol = 1e-12;             // relative error of each decoded block
  int64_t state_bytes = -1;       // the state's constant size, from its start; -1: not checked
  std::string name;               // section prefix
};
// The layer, initialised, decoding x (B 2, T, C d_model; random) after a parallel prefill of each
// length in check.prefills, then token by token, against its own parallel forward; n_seen = T after.
// A section "<name>prefill <n>" each.
void require_mixer_decode_matches_forward(Mixer& layer, const MixerDecodeCheck& check);

// ids (B, T) through the model's decode: a prefill of `prefill` tokens, then token by token; each
// call's logits (B, n, V).
std::vector<Tensor> decode_logits_in_steps(CausalLM& lm, LmDecodeState& state, const Tensor& ids, int64_t prefill);
// Consecutive blocks of rows (dimension 1) against full (B, T, ...) in f64: relative error < tol each.
void require_rows_match(const std::vector<Tensor>& steps, const Tensor& full, double tol);

// vocab 16 (13 real), d_model 8, max_seq_len 64, init_std 0.3: the small model of the decode checks.
LmConfig small_decode_lm(std::vector<LayerSpec> layers);
// B = 2, T = 15 tokens; prefills of 1 and 6 then single tokens; relative error < 1e-12 in f64.
// The model is built under ParameterScope(cpu, f64), initialised and redrawn here.
void require_decode_matches_forward(const LmConfig& cfg);

}  // namespace hyb
