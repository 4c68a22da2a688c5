// The model a resolved run config describes (config.md 3, 9): the LmConfig, and the model built and
// initialised from it.
//   std::unique_ptr<CausalLM> lm = build_model(rc, Device::cpu(), rc.train->seed);
#pragma once
#include <memory>

#include "layers/model/causal_lm.h"
#include "train/config/run_config.h"

namespace hyb {

// Vocabulary of a tokenizer name: "gpt2" 50257, "byte" 256.
int64_t tokenizer_vocab(const std::string& tokenizer);

LmConfig lm_config_from_run(const RunConfig& rc);

// The embedding parameters of the totals that `config show --params` and the trainer print.
bool is_embedding_parameter(const std::string& name);

struct ParamCounts {
  int64_t total = 0, non_embedding = 0;
};
// Counted on a model built on the CPU without initial values (names and shapes only).
ParamCounts parameter_counts(const RunConfig& rc);

// Parameters (f32 masters) on `device`, initialised from `seed` (config.md 3.8).
std::unique_ptr<CausalLM> build_model(const RunConfig& rc, Device device, uint64_t seed);

}  // namespace hyb
