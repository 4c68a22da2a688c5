// The parameter listing. Weight decay and lr multipliers come from the config's optimizer; a config
// without a train section shows the optimizer's defaults. The embedding and lm_head are the
// embedding parameters of the totals.
#include "train/config/config_params_view.h"

#include "train/config/config_train.h"
#include "train/model_from_config.h"

namespace hyb {

std::string params_view(const RunConfig& rc) {
  ParameterScope scope(Device::cpu());
  CausalLM lm(lm_config_from_run(rc));
  const std::vector<NamedParameter> params = lm.named_parameters();
  OptimizerConfig opt;
  if (rc.train) opt = rc.train->optimizer;
  else opt.weight_decay = kOptimizerKeys.find("weight_decay")->default_value.get<double>();
  const std::vector<ParamSetting> settings = resolve_param_settings(opt.weight_decay, opt.param_groups, params);

  size_t name_width = 0, shape_width = 0, count_width = 0;
  for (const NamedParameter& p : params) {
    name_width = std::max(name_width, p.name.size());
    shape_width = std::max(shape_width, str_cat(p.var.shape()).size());
    count_width = std::max(count_width, std::to_string(p.var.numel()).size());
  }
  std::string out;
  int64_t total = 0, embedding = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const NamedParameter& p = params[i];
    const std::string shape = str_cat(p.var.shape());
    const std::string n = std::to_string(p.var.numel());
    total += p.var.numel();
    if (is_embedding_parameter(p.name)) embedding += p.var.numel();
    out += str_cat(p.name, std::string(name_width - p.name.size() + 2, ' '), shape, std::string(shape_width - shape.size() + 2, ' '),
                   std::string(count_width - n.size(), ' '), n, "  weight_decay=", Json(settings[i].weight_decay).dump(), "  lr_mult=", Json(settings[i].lr_mult).dump(), "\n");
  }
  return out + str_cat("parameters: ", total, "  non-embedding: ", total - embedding, "\n");
}

}  // namespace hyb
