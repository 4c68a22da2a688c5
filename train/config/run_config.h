// A resolved run config as typed structs (the JSON stays beside them as `resolved`, the text that
// is printed, stored and hashed). Built by resolve_run_config (config_resolve.h).
//   RunConfig rc = load_run_config("configs/quickstart.json", {"train.steps=10"});
//   rc.model.layers[3].mixer   // the family's object: attention_config_from_json(...)
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "core/device.h"
#include "core/dtype.h"
#include "layers/mlp/mlp_config.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "train/config/config_data.h"
#include "train/config/config_param_groups.h"

namespace hyb {

struct LayerConfig {
  std::string type;  // mixer.type, a registry name
  Json mixer;        // the family's resolved object, read by the family's own *_config_from_json
  MlpConfig mlp;
};

struct ModelConfig {
  int64_t d_model = 0, vocab_size = 0, max_seq_len = 0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  std::string embed_scale = "none";  // "none" | "sqrt_d_model"
  double embed_dropout = 0;
  std::string init = "family";       // "family" | "gpt2"
  double init_std = 0.02;
  std::vector<LayerConfig> layers;
  int64_t num_layers() const { return int64_t(layers.size()); }
};

struct MqarSegment {
  int64_t seq_len = 0, n_kv = 0;
  std::optional<int64_t> train_examples;
};

struct MqarConfig {
  int64_t vocab = 8192;
  double power_a = 0.01;
  bool random_fill = true;
  std::vector<MqarSegment> segments, test_segments;
  int64_t test_examples = 1000, test_seed = 1000003;
  std::optional<int64_t> train_examples;
};

struct DataConfig {
  std::string task = "lm";  // "lm" | "mqar"
  std::string tokenizer = "gpt2";
  std::vector<std::string> train, val;  // patterns as written
  double val_fraction = 0;
  int64_t seq_len = 0;
  bool shuffle = true;
  std::optional<MqarConfig> mqar;
  DataFiles files;  // the shards the patterns matched (lm only)
};

struct OptimizerConfig {
  AdamWHyper adam;
  double weight_decay = 0.1;
  std::vector<ParamGroup> param_groups;
};

struct TrainConfig {
  Device device;
  std::string precision;  // "bf16" | "fp32"
  DType compute = DType::f32;
  uint64_t seed = 0;
  int64_t batch_size = 0, grad_accum = 1, steps = 0;
  std::optional<int64_t> tokens;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  double grad_clip = 1.0;
  bool skip_nonfinite = false;
  int64_t nonfinite_max_skips = 10, log_interval = 10, eval_interval = 0, checkpoint_interval = 0, keep_last = 3;
  std::string out_dir;
  double bucket_mb = 25;
  bool zero1 = false;
  std::optional<double> window_p_full;
};

struct EvalConfig {
  std::optional<int64_t> max_windows;
  std::optional<int64_t> average_keep, average_count;  // eval.average {keep, average}
  std::vector<std::string> param_probes;
};

struct RunConfig {
  std::string source;  // the file as named, or DIR/config.json
  std::string name;
  ModelConfig model;
  DataConfig data;
  std::optional<TrainConfig> train;  // absent only where the command did not require it
  EvalConfig eval;
  std::vector<std::string> layout_codes;  // one per layer when written in the layout form
  Json resolved;                          // the resolved config, schema order
  std::string sha256;                     // config_sha256 of `resolved`
};

// The typed view of a resolved config (no checks: `resolved` came out of resolution).
void fill_typed_config(RunConfig& rc);
// A resolved data.mqar object (resolve_mqar's output) as its typed view.
MqarConfig mqar_config_from_json(const Json& resolved_mqar);

}  // namespace hyb
