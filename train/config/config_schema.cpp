// The schema's tables in the order of config.md, for the schema-wide key lookup and the docs.
#include "train/config/config_schema.h"

#include <utility>
#include <vector>

#include "layers/mlp/mlp_config.h"
#include "layers/registry.h"
#include "train/config/config_data.h"
#include "train/config/config_eval.h"
#include "train/config/config_model.h"
#include "train/config/config_mqar.h"
#include "train/config/config_param_groups.h"
#include "train/config/config_schedule.h"
#include "train/config/config_train.h"

namespace hyb {

namespace {

Json as_written(const Json& v, const std::string&) { return v; }

struct Section {
  std::string path;  // where the table's object sits ("train.optimizer", "model.layers[i].mixer")
  const KeyTable* table;
  std::string note;  // one line under the heading in the docs
};

std::vector<Section> sections() {
  std::vector<Section> s = {
      {"", &kRunKeys, "A run config is one JSON object (config.md 1)."},
      {"model", &kModelKeys, "The network (config.md 3.1). A resolved config holds the scalar keys, `num_layers` and `layers`."},
      {"model.block", &kBlockKeys, "A block, as `model.block`, `model.blocks.CODE` or `model.layers[i]` (config.md 3.2); "
                                   "in `block`, `blocks` and `overrides` it may be partial."},
      {"model.block.mlp", &kMlpKeys, "The feed-forward sublayer (config.md 3.4)."},
      {"model.layout", &kLayoutKeys, "Which named block each layer is (config.md 3.5): exactly one of `pattern`, `repeat` "
                                     "(with `n_layers`) and `generate`."},
      {"model.layout.generate", &kGenerateKeys, "The layout generator (intra_hybrid.md 2.1, 2.2): `special` at the "
                                                "`n_special` layers that `placement` picks, `base` at the others."},
      {"model.overrides[i]", &kOverrideKeys, "Per-layer changes, merged in order into the layers they select (config.md 3.5, 3.6)."},
  };
  for (const LayerEntry& e : layer_entries()) {
    s.push_back({"model.block.mixer", e.keys, str_cat("The `", e.type, "` mixer.")});
    for (const KeySpec& k : e.keys->keys)
      if (k.table) s.push_back({str_cat("model.block.mixer.", k.name), k.table, str_cat("Inside the `", e.type, "` mixer.")});
  }
  const std::vector<Section> rest = {
      {"data", &kDataKeys, "What the run reads (config.md 5)."},
      {"data.mqar", &kMqarKeys, "The MQAR task (eval.md 4); `preset` names a row of the preset table below."},
      {"data.mqar.segments[i]", &kMqarSegmentKeys, "A training segment."},
      {"data.mqar.test_segments[i]", &kMqarTestSegmentKeys, "A test segment."},
      {"train", &kTrainKeys, "How the run is trained (config.md 6)."},
      {"train.optimizer", &kOptimizerKeys, "AdamW (config.md 6.3)."},
      {"train.optimizer.param_groups[i]", &kParamGroupKeys, "One per-parameter rule; `weight_decay` or `lr_mult` is required."},
      {"train.schedule", &kScheduleKeys, "The learning-rate schedule (config.md 6.4); a key that does not apply to the type is an error."},
      {"train.data_parallel", &kDataParallelKeys, "Data parallelism (config.md 6.9)."},
      {"train.window_randomization", &kWindowRandomizationKeys, "NHA's randomized windows (nha.md 8.1)."},
      {"eval", &kEvalKeys, "Evaluation during training (config.md 7)."},
      {"eval.average", &kAverageKeys, "Checkpoint averaging (eval.md 2)."},
  };
  s.insert(s.end(), rest.begin(), rest.end());
  return s;
}

std::string presets_markdown() {
  std::string md = "| preset | vocab | segments (seq_len, n_kv[, train_examples]) | test segments | random_fill | train_examples | test_examples |\n"
                   "| --- | --- | --- | --- | --- | --- | --- |\n";
  auto segments = [](const Json& list) {
    std::string s;
    for (const Json& seg : list) {
      s += str_cat(s.empty() ? "" : ", ", "(", seg["seq_len"].dump(), ", ", seg["n_kv"].dump());
      if (seg.contains("train_examples") && !seg["train_examples"].is_null()) s += str_cat(", ", seg["train_examples"].dump());
      s += ")";
    }
    return s;
  };
  for (const std::string& name : mqar_preset_names()) {
    const Json p = mqar_preset(name);
    md += str_cat("| `", name, "` | ", p["vocab"].dump(), " | ", segments(p["segments"]), " | ",
                  p["test_segments"].is_null() ? std::string("the same") : segments(p["test_segments"]), " | ",
                  p["random_fill"].dump(), " | ", p["train_examples"].dump(), " | ", p["test_examples"].dump(), " |\n");
  }
  return md;
}

}  // namespace

const KeyTable kRunKeys{"config", nullptr, {
    {.name = "name", .type = KeyType::string, .default_doc = "the config file's name without `.json`",
     .doc = "run name; the default output directory is `runs/<name>`"},
    {.name = "model", .type = KeyType::custom, .required = true, .check = as_written, .type_doc = "object",
     .doc = "the network"},
    {.name = "data", .type = KeyType::custom, .required = true, .check = as_written, .type_doc = "object",
     .doc = "what it reads"},
    {.name = "train", .type = KeyType::custom, .check = as_written, .type_doc = "object",
     .default_doc = "required by the commands that train", .doc = "how it is trained"},
    {.name = "eval", .type = KeyType::custom, .check = as_written, .type_doc = "object", .default_doc = "`{}`",
     .doc = "evaluation during training"},
}};

std::string schema_key_path(std::string_view key) {
  static const std::vector<std::pair<std::string, std::string>> index = [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const Section& s : sections())
      for (const KeySpec& k : s.table->keys) out.emplace_back(k.name, join_path(s.path, k.name));
    return out;
  }();
  for (const auto& [name, path] : index)
    if (name == key) return path;
  return "";
}

std::string config_reference_markdown() {
  std::string md;
  for (const Section& s : sections()) {
    md += str_cat("### ", s.path.empty() ? "top level" : str_cat("`", s.path, "`"), "\n\n", s.note, "\n\n", key_table_markdown(*s.table), "\n");
    if (s.path == "data.mqar") md += str_cat("MQAR presets (eval.md 4.4):\n\n", presets_markdown(), "\n");
  }
  return md;
}

}  // namespace hyb
