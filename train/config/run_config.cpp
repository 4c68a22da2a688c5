// Typed views of the resolved sections. Every key exists in a resolved config, so lookups use at().
#include "train/config/run_config.h"

#include "train/config/config_schedule.h"

namespace hyb {

namespace {

std::vector<std::string> patterns(const Json& v) {
  if (v.is_null()) return {};
  if (v.is_string()) return {v.get<std::string>()};
  return v.get<std::vector<std::string>>();
}

std::optional<int64_t> opt_int(const Json& v) { return v.is_null() ? std::nullopt : std::optional<int64_t>(v.get<int64_t>()); }

std::vector<MqarSegment> segments(const Json& list) {
  std::vector<MqarSegment> out;
  for (const Json& s : list)
    out.push_back({s.at("seq_len").get<int64_t>(), s.at("n_kv").get<int64_t>(),
                   s.contains("train_examples") ? opt_int(s["train_examples"]) : std::nullopt});
  return out;
}

}  // namespace

MqarConfig mqar_config_from_json(const Json& q) {
  return {q.at("vocab").get<int64_t>(), q.at("power_a").get<double>(), q.at("random_fill").get<bool>(),
          segments(q.at("segments")), segments(q.at("test_segments")), q.at("test_examples").get<int64_t>(),
          q.at("test_seed").get<int64_t>(), opt_int(q.at("train_examples"))};
}

void fill_typed_config(RunConfig& rc) {
  const Json& r = rc.resolved;
  rc.name = r.at("name").get<std::string>();

  const Json& m = r.at("model");
  ModelConfig& mc = rc.model;
  mc.d_model = m.at("d_model").get<int64_t>();
  mc.vocab_size = m.at("vocab_size").get<int64_t>();
  mc.max_seq_len = m.at("max_seq_len").get<int64_t>();
  mc.norm_eps = m.at("norm_eps").get<double>();
  mc.tie_embeddings = m.at("tie_embeddings").get<bool>();
  mc.embed_scale = m.at("embed_scale").get<std::string>();
  mc.embed_dropout = m.at("embed_dropout").get<double>();
  mc.init = m.at("init").get<std::string>();
  mc.init_std = m.at("init_std").get<double>();
  mc.layers.clear();
  for (const Json& l : m.at("layers"))
    mc.layers.push_back({l.at("mixer").at("type").get<std::string>(), l.at("mixer"), mlp_config_from_json(l.at("mlp"))});

  const Json& d = r.at("data");
  DataConfig& dc = rc.data;
  dc.task = d.at("task").get<std::string>();
  dc.seq_len = d.at("seq_len").get<int64_t>();
  if (dc.task == "lm") {
    dc.tokenizer = d.at("tokenizer").get<std::string>();
    dc.train = patterns(d.at("train"));
    dc.val = patterns(d.at("val"));
    dc.val_fraction = d.at("val_fraction").get<double>();
    dc.shuffle = d.at("shuffle").get<bool>();
  } else {
    dc.mqar = mqar_config_from_json(d.at("mqar"));
  }

  if (r.contains("train")) {
    const Json& t = r.at("train");
    TrainConfig tc;
    tc.device = Device::parse(t.at("device").get<std::string>());
    tc.precision = t.at("precision").get<std::string>();
    tc.compute = tc.precision == "bf16" ? DType::bf16 : DType::f32;
    tc.seed = t.at("seed").get<uint64_t>();
    tc.batch_size = t.at("batch_size").get<int64_t>();
    tc.grad_accum = t.at("grad_accum").get<int64_t>();
    tc.steps = t.at("steps").get<int64_t>();
    tc.tokens = opt_int(t.at("tokens"));
    const Json& o = t.at("optimizer");
    tc.optimizer.adam = AdamWHyper{o.at("lr").get<double>(), o.at("betas")[0].get<double>(), o.at("betas")[1].get<double>(),
                                   o.at("eps").get<double>()};
    tc.optimizer.weight_decay = o.at("weight_decay").get<double>();
    for (size_t k = 0; k < o.at("param_groups").size(); ++k) {
      const Json& g = o.at("param_groups")[k];
      ParamGroup pg;
      const std::string path = str_cat("train.optimizer.param_groups[", k, "].params");
      if (g.at("params").is_string()) {
        pg.globs = {g.at("params").get<std::string>()};
        pg.glob_paths = {path};
      } else {
        pg.globs = g.at("params").get<std::vector<std::string>>();
        for (size_t i = 0; i < pg.globs.size(); ++i) pg.glob_paths.push_back(str_cat(path, "[", i, "]"));
      }
      if (!g.at("weight_decay").is_null()) pg.weight_decay = g.at("weight_decay").get<double>();
      if (!g.at("lr_mult").is_null()) pg.lr_mult = g.at("lr_mult").get<double>();
      pg.source = rc.source;
      tc.optimizer.param_groups.push_back(std::move(pg));
    }
    tc.schedule = schedule_config_from_json(t.at("schedule"), tc.steps);
    tc.grad_clip = t.at("grad_clip").get<double>();
    tc.skip_nonfinite = t.at("nonfinite") == "skip";
    tc.nonfinite_max_skips = t.at("nonfinite_max_skips").get<int64_t>();
    tc.log_interval = t.at("log_interval").get<int64_t>();
    tc.eval_interval = t.at("eval_interval").get<int64_t>();
    tc.checkpoint_interval = t.at("checkpoint_interval").get<int64_t>();
    tc.keep_last = t.at("keep_last").get<int64_t>();
    tc.out_dir = t.at("out_dir").get<std::string>();
    tc.bucket_mb = t.at("data_parallel").at("bucket_mb").get<double>();
    tc.zero1 = t.at("data_parallel").at("zero1").get<bool>();
    if (!t.at("window_randomization").is_null()) tc.window_p_full = t.at("window_randomization").at("p_full").get<double>();
    rc.train = std::move(tc);
  }

  const Json& e = r.at("eval");
  rc.eval.max_windows = opt_int(e.at("max_windows"));
  if (!e.at("average").is_null()) {
    rc.eval.average_keep = e.at("average").at("keep").get<int64_t>();
    rc.eval.average_count = e.at("average").at("average").get<int64_t>();
  }
  rc.eval.param_probes = e.at("param_probes").get<std::vector<std::string>>();
}

}  // namespace hyb
