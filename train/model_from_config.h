// The model a resolved run config describes (config.md 3, 9): its LmConfig, and the model built
// and initialised from it. The config must already be resolved (every key present, layers explicit).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "layers/model/causal_lm.h"

namespace hyb {

// Vocabulary of a tokenizer name: "gpt2" 50257, "byte" 256.
int64_t tokenizer_vocab(const std::string& tokenizer);

LmConfig model_config_from_resolved(const nlohmann::json& resolved);

// Built with its parameters on `device` (f32 masters) and initialised from `seed` (config.md 3.8).
std::unique_ptr<CausalLM> build_model(const nlohmann::json& resolved, Device device, uint64_t seed);

}  // namespace hyb
