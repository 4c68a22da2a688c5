#include "train/model_from_config.h"

namespace hyb {

using json = nlohmann::json;

int64_t tokenizer_vocab(const std::string& t) {
  if (t == "gpt2") return 50257;
  if (t == "byte") return 256;
  throw Error(str_cat("data.tokenizer: expected \"gpt2\" or \"byte\", got \"", t, "\""));
}

LmConfig model_config_from_resolved(const json& cfg) {
  const json& m = cfg.at("model");
  const json& d = cfg.at("data");
  LmConfig c;
  c.vocab_size = m.at("vocab_size").get<int64_t>();
  c.real_vocab = d.value("task", std::string("lm")) == "mqar" ? c.vocab_size
                                                               : tokenizer_vocab(d.at("tokenizer").get<std::string>());
  c.d_model = m.at("d_model").get<int64_t>();
  c.max_seq_len = m.at("max_seq_len").get<int64_t>();
  c.norm_eps = m.at("norm_eps").get<double>();
  c.tie_embeddings = m.at("tie_embeddings").get<bool>();
  c.embed_scale_sqrt_d = m.at("embed_scale").get<std::string>() == "sqrt_d_model";
  c.init = m.at("init").get<std::string>();
  c.init_std = m.at("init_std").get<double>();
  for (const json& layer : m.at("layers")) {
    LayerSpec s;
    s.mixer = layer.at("mixer");
    const json& mlp = layer.at("mlp");
    s.mlp_type = mlp.at("type").get<std::string>();
    if (s.mlp_type != "none") s.intermediate_size = mlp.at("intermediate_size").get<int64_t>();
    c.layers.push_back(std::move(s));
  }
  return c;
}

std::unique_ptr<CausalLM> build_model(const json& resolved, Device device, uint64_t seed) {
  ParameterScope scope(device);
  auto lm = std::make_unique<CausalLM>(model_config_from_resolved(resolved));
  lm->initialize(seed);
  return lm;
}

}  // namespace hyb
