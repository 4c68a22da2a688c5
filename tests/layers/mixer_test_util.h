// What the mixer tests of every layer family share: a mixer object resolved by its family's own
// rules (as the config loader does), the construction context, parameters redrawn at random, and the
// model-level decoding check (a small f64 CausalLM mixing the family with attention decodes token by
// token, after prefills of 1 and 6, to the parallel forward's logits).
//   json m = resolve_test_mixer("gsa", {{"num_slots", 3}}, {.d_model = 8});
//   GsaMixer layer(gsa_config_from_json(m), test_mixer_context({.d_model = 8}));
//   randomize_parameters(layer, 2);
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layers/mixer.h"
#include "layers/model/causal_lm.h"

namespace hyb {

struct MixerTestShape {
  int64_t d_model = 8;
  int64_t max_seq_len = 64;
  int64_t num_layers = 1;
  double init_std = 0.02;
};

nlohmann::json resolve_test_mixer(const std::string& type, const nlohmann::json& written, const MixerTestShape& shape);
MixerContext test_mixer_context(const MixerTestShape& shape, const std::string& init = "family", bool has_mlp = true);
// Every parameter N(0, sd), by name (Philox), so the same values land on any device and dtype.
void randomize_parameters(Module& m, uint64_t seed, double sd = 0.5);

// Every parameter of the layer and its input x against f64 central differences (gradcheck_leaves),
// max relative error < 1e-6; build the layer under ParameterScope(cpu, f64).
void require_mixer_gradcheck(Mixer& layer, const Var& x);

// vocab 16 (13 real), d_model 8, max_seq_len 64, init_std 0.3: the small model of the decode checks.
LmConfig small_decode_lm(std::vector<LayerSpec> layers);
// B = 2, T = 15 tokens; prefills of 1 and 6 then single tokens; relative error < 1e-12 in f64.
// The model is built under ParameterScope(cpu, f64), initialised and redrawn here.
void require_decode_matches_forward(const LmConfig& cfg);

}  // namespace hyb
