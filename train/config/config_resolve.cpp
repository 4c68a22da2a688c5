// The resolution driver. Each step's checker throws ConfigKeyError with the path it knows; here the
// path gets its SOURCE (the file, or --set where an assignment wrote it). The layer step formats
// its own errors, because only the layer list knows which block or override a value came from.
#include "train/config/config_resolve.h"

#include <filesystem>

#include "core/device.h"
#include "train/config/config_data.h"
#include "train/config/config_eval.h"
#include "train/config/config_hash.h"
#include "train/config/config_json.h"
#include "train/config/config_layers.h"
#include "train/config/config_model.h"
#include "train/config/config_schema.h"
#include "train/config/config_train.h"

namespace hyb {

namespace {

template <typename F>
auto guarded(const SourceMap& src, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ConfigKeyError& e) {
    throw Error(format_config_error(src.source_of(e.path()), e.path(), e, {}, schema_key_path));
  }
}

template <typename F>
auto guarded_set(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ConfigKeyError& e) {
    throw Error(format_config_error("--set", e.path(), e, {}, schema_key_path));
  }
}

std::string default_name(const std::string& source) {
  std::string name = std::filesystem::path(source).filename().string();
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json") name.resize(name.size() - 5);
  return name;
}

// Phase 1 on a config that lists its layers: paths into block, blocks or layout change nothing.
void refuse_compact_paths(const Json& cfg, const Assignment& a) {
  const bool explicit_layers = cfg.contains("model") && cfg["model"].is_object() && cfg["model"].contains("layers");
  if (!explicit_layers) return;
  for (const char* k : {"block", "blocks", "layout"})
    if (a.path.starts_with("model", k))
      throw Error(str_cat("--set: ", a.path.text, ": ",
                          cannot_be_used_problem("this config lists its layers explicitly; set model.layers[...] instead")));
}

// The outermost object that an assignment to `path` created (absent or null before it), so that an
// error about that object names --set; `path` itself when everything above it was written.
std::string outermost_created(const Json& before, const std::string& path) {
  const ConfigPath p = *parse_config_path(path);  // a concrete path: keys and plain indices
  const Json* node = &before;
  std::string prefix;
  for (const PathStep& step : p.steps) {
    if (step.is_key) {
      prefix = join_path(prefix, step.key);
      if (!node->is_object() || !node->contains(step.key) || (*node)[step.key].is_null()) return prefix;
      node = &(*node)[step.key];
    } else {
      const int64_t i = step.selector.items[0].index;
      prefix = str_cat(prefix, "[", i, "]");
      node = &(*node)[size_t(i)];  // selected elements exist: assign_path checked
    }
  }
  return path;
}

// Validation needs a split to validate on: data.val, data.val_fraction or the MQAR test set.
void check_between_sections(const Json& data, const Json& train, const Json& eval, const Json& layers) {
  const bool has_val =
      data["task"] == "mqar" || !data["val"].is_null() || data["val_fraction"].get<double>() > 0;
  const char* no_val = "there is no validation split (give data.val or data.val_fraction)";
  const int64_t eval_interval = train.is_null() ? 0 : json_int(train["eval_interval"]);
  if (!train.is_null()) {
    if (eval_interval > 0 && !has_val) throw ConfigKeyError("train.eval_interval", cannot_be_used_problem(no_val));
    if (train["schedule"]["type"] == "plateau") {
      if (!has_val) throw ConfigKeyError("train.schedule.type", cannot_be_used_problem(str_cat("\"plateau\" steps on validations and ", no_val)));
      if (eval_interval == 0)
        throw ConfigKeyError("train.eval_interval",
                             expected_problem("an integer >= 1 with schedule type \"plateau\" (it steps on validations)", train["eval_interval"]));
    }
    if (!train["window_randomization"].is_null()) {
      bool nha = false;
      for (size_t i = 0; i < layers.size(); ++i) {
        const Json& m = layers[i]["mixer"];
        if (m["type"] != "nha") continue;
        nha = true;
        if (m["pos_enc"] == "learned_short")
          throw ConfigKeyError("train.window_randomization",
                               cannot_be_used_problem(str_cat("model.layers[", i, "] has pos_enc \"learned_short\", whose bias "
                                                              "covers only the configured window")));
      }
      if (!nha) throw ConfigKeyError("train.window_randomization", cannot_be_used_problem("the model has no nha layer"));
    }
  }
  if (!eval["average"].is_null()) {
    if (!has_val) throw ConfigKeyError("eval.average", cannot_be_used_problem(no_val));
    if (eval_interval == 0)
      throw ConfigKeyError("eval.average", cannot_be_used_problem("train.eval_interval is 0 (averaging keeps the best checkpoints of the validations)"));
    // The key is in the schema (config.md 7), but the trainer does not keep or average checkpoints
    // yet: refused, rather than a run that reports the last weights as if they were averaged.
    throw ConfigKeyError("eval.average", cannot_be_used_problem("checkpoint averaging (eval.md 2) is not implemented yet"));
  }
}

}  // namespace

RunConfig resolve_run_config(const Json& written, const std::string& source, const std::vector<Assignment>& sets,
                             const ResolveOptions& options) {
  SourceMap src(source);
  if (!written.is_object()) throw Error(str_cat(source, ": expected a JSON object at the top level, got ", compact_value(written)));
  Json cfg = written;

  // Step 1: phase-1 assignments, in command-line order.
  for (const Assignment& a : sets) {
    if (a.phase2()) continue;
    refuse_compact_paths(cfg, a);
    const Json before = cfg;
    guarded_set([&] {
      assign_path(cfg, a.path, 0, "", a.value, [&](const std::string& p) { src.add_set(outermost_created(before, p)); });
    });
  }

  std::string name;
  guarded(src, [&] {
    check_known_keys(kRunKeys, cfg, "");
    for (const char* k : {"model", "data"})
      if (!cfg.contains(k)) throw ConfigKeyError(k, missing_key_problem());
    name = cfg.contains("name") ? normalize_value(*kRunKeys.find("name"), cfg["name"], "name").get<std::string>()
                                : default_name(source);
    require_object(cfg["model"], "model");
    check_known_keys(kModelKeys, cfg["model"], "model");
  });
  const Json& model = cfg["model"];

  // Steps 2 to 4: the layer list, the overrides, phase-2 assignments.
  LayerList list = guarded(src, [&] { return form_layer_list(model, src); });
  for (const Assignment& a : sets)
    if (a.phase2()) guarded_set([&] { apply_layer_assignment(list, a, src); });

  // Step 5: data, then the model's own keys.
  const Json data = guarded(src, [&] { return resolve_data_section(cfg["data"]); });
  const Json model_keys = guarded(src, [&] { return resolve_model_keys(model, data); });

  // Step 6: the layers in index order.
  LayerConfigContext ctx;
  ctx.d_model = json_int(model_keys["d_model"]);
  ctx.max_seq_len = json_int(model_keys["max_seq_len"]);
  ctx.init_std = model_keys["init_std"].get<double>();
  ctx.blocks = model.contains("blocks") ? &model["blocks"] : nullptr;
  const Json layers = resolve_layers(list, ctx);

  // Step 7: train, eval, the rules between sections, the files.
  Json train;
  if (cfg.contains("train")) {
    TrainContext tctx{name, json_int(data["seq_len"]), data["task"] == "mqar", options.world_size,
                      options.cuda_devices >= 0 ? options.cuda_devices : cuda_device_count()};
    train = guarded(src, [&] { return resolve_train_section(cfg["train"], tctx); });
  } else if (options.require_train) {
    throw Error(str_cat(source, ": train: ", missing_key_problem()));
  }
  const Json eval = guarded(src, [&] { return resolve_eval_section(cfg.contains("eval") ? cfg["eval"] : Json::object()); });
  guarded(src, [&] { check_between_sections(data, train, eval, layers); });
  DataFiles files;
  if (options.check_files) files = guarded(src, [&] { return check_data_files(data); });

  // Step 8: the resolved config, in schema order.
  RunConfig rc;
  rc.source = source;
  Json resolved_model = model_keys;
  resolved_model["num_layers"] = int64_t(layers.size());
  resolved_model["layers"] = layers;
  rc.resolved = Json{{"name", name}, {"model", resolved_model}, {"data", data}};
  if (!train.is_null()) rc.resolved["train"] = train;
  rc.resolved["eval"] = eval;
  rc.sha256 = config_sha256(rc.resolved);
  rc.layout_codes = list.codes;
  fill_typed_config(rc);
  rc.data.files = files;
  if (rc.train)
    for (size_t k = 0; k < rc.train->optimizer.param_groups.size(); ++k)
      rc.train->optimizer.param_groups[k].source = src.source_of(str_cat("train.optimizer.param_groups[", k, "]"));
  return rc;
}

RunConfig load_run_config(const std::string& file, const std::vector<std::string>& set_args, const ResolveOptions& options) {
  std::vector<Assignment> sets;
  for (const std::string& s : set_args) sets.push_back(parse_assignment(s));
  return resolve_run_config(read_config_file(file), file, sets, options);
}

}  // namespace hyb
