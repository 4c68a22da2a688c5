// The child side of `hybrid ablate`. Evaluation reuses what `hybrid eval` and `hybrid eval mqar`
// call (evaluate_ppl, evaluate_mqar and their records) on the unit's checkpoint, so a suite's numbers
// are the numbers those commands print for the same weights.
#include "eval/ablate/ablate_unit.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#if HYBRID_CUDA
#include "core/cuda/caching_allocator.h"
#endif
#include "data/loader.h"
#include "eval/mqar.h"
#include "eval/perplexity.h"
#include "eval/records.h"
#include "train/checkpoint_model.h"
#include "train/config/config_json.h"
#include "train/config/config_mqar.h"
#include "train/config/config_resolve.h"
#include "train/train_run.h"
#include "train/trainer.h"

namespace hyb {

namespace fs = std::filesystem;

namespace {

Json eval_json(const AblateEval& e) {
  Json j{{"metric", e.metric}};
  if (!e.split.empty()) j["split"] = e.split;
  if (!e.data.empty()) j["data"] = e.data;
  if (!e.preset.empty()) j["preset"] = e.preset;
  return j;
}

AblateEval eval_from_json(const Json& j) {
  return {j.at("metric").get<std::string>(), j.value("split", ""), j.value("data", ""), j.value("preset", "")};
}

RecordEnvelope envelope_of(const LoadedModel& lm, const std::string& dir) {
  return {fs::path(dir).filename().string(), lm.config.sha256, lm.step, lm.config.train ? lm.config.train->seed : 0};
}

MqarConfig mqar_config_for(const LoadedModel& lm, const std::string& preset) {
  if (!preset.empty()) return mqar_config_from_json(resolve_mqar(mqar_preset(preset), "preset"));
  HYB_CHECK(lm.config.data.mqar, "ablate: an mqar evaluation without a preset needs a model trained on MQAR (",
            lm.checkpoint_dir, " has data.task \"", lm.config.data.task, "\")");
  return *lm.config.data.mqar;
}

MqarScore score_mqar(LoadedModel& lm, const MqarConfig& mc) {
  HYB_CHECK(mc.vocab == lm.model->config().real_vocab, "ablate: the MQAR vocabulary ", mc.vocab, " differs from the model's vocab_size ",
            lm.model->config().real_vocab);
  lm.model->set_training(false);
  return evaluate_mqar(*lm.model, MqarTestSet(mc), 32, lm.device, lm.compute);
}

// Adds the metrics of one evaluation ("ppl.SPLIT.loss", "mqar.recall_score", ...) and appends its record.
void evaluate(LoadedModel& lm, const AblateEval& e, const std::string& dir, Json& metrics) {
  const std::string records = (fs::path(dir) / "eval.jsonl").string();
  if (e.metric == "ppl") {
    HYB_CHECK(fs::exists(e.data), "ablate: the shard ", e.data, " of split ", e.split,
              " does not exist (write it with hybrid tokenize --preset ", e.split.substr(0, e.split.find('.')),
              " --tokenizer gpt2 --out ", fs::path(e.data).parent_path().string(), ")");
    const TokenStream stream = open_data_streams({e.data}, {}, 0.0).train;
    const int64_t T = lm.config.data.seq_len;
    const EvalWindows windows(stream, T, lm.model->config().real_vocab, -1);
    HYB_CHECK(windows.count() > 0, "ablate: ", e.data, " holds no window of ", T + 1, " tokens");
    lm.model->set_training(false);
    const PplResult r = evaluate_ppl(*lm.model, windows, 8, lm.device, lm.compute);
    const std::string k = "ppl." + e.split + ".";
    metrics[k + "loss"] = r.loss();
    metrics[k + "ppl"] = std::exp(r.loss());
    metrics[k + "token_acc"] = r.token_acc();
    spdlog::info("ablate: {} loss {:.4f} (ppl {:.2f}) on {} windows", e.split, r.loss(), std::exp(r.loss()), r.windows);
    append_record(records, ppl_record(envelope_of(lm, dir), e.split, T, r));
    return;
  }
  const MqarConfig mc = mqar_config_for(lm, e.preset);
  const MqarScore s = score_mqar(lm, mc);
  metrics["mqar.recall_score"] = s.recall_score();
  metrics["mqar.loss"] = s.labelled() ? s.nll_sum() / double(s.labelled()) : 0.0;
  metrics["mqar.saturated"] = s.saturated() ? 1 : 0;
  metrics["mqar.at_chance"] = s.at_chance() ? 1 : 0;
  spdlog::info("ablate: mqar recall score {:.4f}", s.recall_score());
  append_record(records, mqar_record(s, mc, e.preset, envelope_of(lm, dir)));
}

void evaluate_all(const std::string& ckpt, const std::vector<std::string>& sets, const std::vector<AblateEval>& evals,
                  const std::string& dir, Json& metrics) {
  LoadedModel lm = load_model_from_checkpoint(ckpt, sets);
  for (const AblateEval& e : evals) evaluate(lm, e, dir, metrics);
}

// NHA Table 5 "Optimized" (ablations.md 5.5): each layer outside the start set added in turn, scored
// on a separate test set, the best kept (ties to the lowest layer), then scored on the standard test set.
void run_search(const UnitSpec& u, const std::string& dir, Json& result) {
  const EvalSearch& s = *u.search;
  auto full_windows = [](const std::vector<int64_t>& layers) {
    std::string sel;
    for (int64_t l : layers) sel += (sel.empty() ? "" : ",") + std::to_string(l);
    return std::vector<std::string>{str_cat("model.layers[", sel, "].mixer.window=-1")};
  };
  // The layer count from the run's resolved config (its explicit layer list), without loading weights.
  const int64_t n_layers = int64_t(read_config_file((fs::path(u.checkpoint) / "config.json").string()).at("model").at("layers").size());
  std::string preset;
  for (const AblateEval& e : u.evals)
    if (e.metric == "mqar") preset = e.preset;
  int64_t best = -1;
  double best_score = -1;
  Json tried = Json::object();
  for (int64_t l = 0; l < n_layers; ++l) {
    if (std::find(s.start.begin(), s.start.end(), l) != s.start.end()) continue;
    std::vector<int64_t> layers = s.start;
    layers.push_back(l);
    LoadedModel lm = load_model_from_checkpoint(u.checkpoint, full_windows(layers));
    MqarConfig mc = mqar_config_for(lm, preset);
    mc.test_seed = s.search_test_seed;
    const double score = score_mqar(lm, mc).recall_score();
    tried[std::to_string(l)] = score;
    spdlog::info("ablate: search adds layer {}: recall score {:.4f} on test seed {}", l, score, s.search_test_seed);
    if (score > best_score) best_score = score, best = l;
  }
  HYB_CHECK(best >= 0, "ablate: eval_search has no candidate layer (every layer of ", n_layers, " is in the start set)");
  std::vector<int64_t> chosen = s.start;
  chosen.push_back(best);
  Json& metrics = result["metrics"];
  evaluate_all(u.checkpoint, full_windows(chosen), u.evals, dir, metrics);
  result["detail"] = {{"chosen_layer", best}, {"search_scores", tried}};
}

// The trainer's newest throughput figure (its last `train` record), 0 when it logged none.
double last_tokens_per_s(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  double tps = 0;
  for (std::string line; std::getline(in, line);) {
    const Json r = Json::parse(line, nullptr, false);
    if (r.is_object() && r.value("kind", "") == "train" && r.value("tokens_per_s", Json()).is_number())
      tps = r["tokens_per_s"].get<double>();
  }
  return tps;
}

}  // namespace

std::string metric_key(const MetricRef& m) { return m.metric + (m.split.empty() ? "" : "." + m.split) + "." + m.field; }

void write_unit(const std::string& dir, const UnitSpec& u) {
  Json j{{"kind", u.kind}, {"row", u.row}, {"task", u.task}, {"seed", u.seed}, {"key", u.key}};
  if (!u.config.is_null()) j["config"] = u.config;
  if (!u.checkpoint.empty()) j["checkpoint"] = u.checkpoint;
  j["eval_sets"] = u.eval_sets;
  j["evals"] = Json::array();
  for (const AblateEval& e : u.evals) j["evals"].push_back(eval_json(e));
  if (u.search)
    j["search"] = {{"start", u.search->start}, {"add", u.search->add}, {"search_test_seed", u.search->search_test_seed}};
  fs::create_directories(dir);
  write_file_atomic((fs::path(dir) / "unit.json").string(), j.dump(2) + "\n");
}

UnitSpec read_unit(const std::string& dir) {
  const Json j = read_config_file((fs::path(dir) / "unit.json").string());
  UnitSpec u;
  u.kind = j.at("kind").get<std::string>();
  u.row = j.at("row").get<std::string>();
  u.task = j.at("task").get<std::string>();
  u.seed = j.at("seed").get<int64_t>();
  u.key = j.at("key").get<std::string>();
  u.config = j.value("config", Json());
  u.checkpoint = j.value("checkpoint", "");
  u.eval_sets = j.at("eval_sets").get<std::vector<std::string>>();
  for (const Json& e : j.at("evals")) u.evals.push_back(eval_from_json(e));
  if (j.contains("search")) {
    const Json& s = j["search"];
    u.search = EvalSearch{s.at("start").get<std::vector<int64_t>>(), s.at("add").get<int64_t>(), s.at("search_test_seed").get<int64_t>()};
  }
  return u;
}

void run_unit(const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  const UnitSpec u = read_unit(dir);
  spdlog::info("ablate unit {}: {} row \"{}\" task {} seed {}", dir, u.kind, u.row, u.task, u.seed);
  Json result{{"status", "done"}, {"key", u.key}, {"metrics", Json::object()}};
  if (u.kind == "train" || u.kind == "probe") {
    const RunConfig rc = resolve_run_config(u.config, (fs::path(dir) / "unit.json").string(), {});
    try {
      const auto t_train = std::chrono::steady_clock::now();
      const TrainRunResult r = train_run(rc, "", nullptr);
      const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_train).count();
      result["steps"] = r.steps;
      result["tokens_per_s"] = last_tokens_per_s((fs::path(dir) / "metrics.jsonl").string());
#if HYBRID_CUDA
      if (rc.train->device.is_cuda()) result["peak_bytes"] = cuda_allocator_stats(rc.train->device.index).peak_allocated_bytes;
#endif
      if (u.kind == "probe") {
        result["metrics"]["probe.steps"] = r.steps;
        result["metrics"]["probe.train_s"] = train_s;
      } else {
        evaluate_all(dir, {}, u.evals, dir, result["metrics"]);
      }
    } catch (const NonFiniteError& e) {
      result["status"] = "diverged";
      result["step"] = e.step();
      result["detail"] = e.what();
    }
  } else if (u.kind == "eval") {
    evaluate_all(u.checkpoint, u.eval_sets, u.evals, dir, result["metrics"]);
  } else {
    HYB_CHECK(u.kind == "search", "ablate: unknown unit kind \"", u.kind, "\" in ", dir, "/unit.json");
    run_search(u, dir, result);
  }
  result["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_file_atomic((fs::path(dir) / "result.json").string(), result.dump(2) + "\n");
}

Json read_result(const std::string& dir) {
  const fs::path p = fs::path(dir) / "result.json";
  if (!fs::exists(p)) return nullptr;
  return read_config_file(p.string());
}

}  // namespace hyb
