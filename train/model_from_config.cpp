#include "train/model_from_config.h"

namespace hyb {

int64_t tokenizer_vocab(const std::string& t) {
  if (t == "gpt2") return 50257;
  if (t == "byte") return 256;
  throw Error(str_cat("data.tokenizer: expected \"gpt2\" or \"byte\", got \"", t, "\""));
}

LmConfig lm_config_from_run(const RunConfig& rc) {
  const ModelConfig& m = rc.model;
  LmConfig c;
  c.vocab_size = m.vocab_size;
  c.real_vocab = rc.data.task == "mqar" ? m.vocab_size : tokenizer_vocab(rc.data.tokenizer);
  c.d_model = m.d_model;
  c.max_seq_len = m.max_seq_len;
  c.norm_eps = m.norm_eps;
  c.tie_embeddings = m.tie_embeddings;
  c.embed_scale_sqrt_d = m.embed_scale == "sqrt_d_model";
  c.embed_dropout = m.embed_dropout;
  c.init = m.init;
  c.init_std = m.init_std;
  c.seed = rc.train ? rc.train->seed : 0;
  for (const LayerConfig& l : m.layers)
    c.layers.push_back({nlohmann::json::parse(l.mixer.dump()), l.mlp.type, l.mlp.intermediate_size});
  return c;
}

bool is_embedding_parameter(const std::string& name) { return name == "model.embeddings.weight" || name == "lm_head.weight"; }

ParamCounts parameter_counts(const RunConfig& rc) {
  ParameterScope scope(Device::cpu());
  const CausalLM lm(lm_config_from_run(rc));
  ParamCounts c;
  for (const NamedParameter& p : lm.named_parameters()) {
    c.total += p.var.numel();
    if (!is_embedding_parameter(p.name)) c.non_embedding += p.var.numel();
  }
  return c;
}

std::unique_ptr<CausalLM> build_model(const RunConfig& rc, Device device, uint64_t seed) {
  ParameterScope scope(device);
  auto lm = std::make_unique<CausalLM>(lm_config_from_run(rc));
  lm->initialize(seed);
  return lm;
}

}  // namespace hyb
