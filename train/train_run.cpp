#include "train/train_run.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "core/current_device.h"
#include "data/loader.h"
#include "eval/mqar.h"
#include "eval/param_probe.h"
#include "eval/perplexity.h"
#include "train/checkpoint.h"
#include "train/config/config_param_groups.h"
#include "train/loader_batches.h"
#include "train/mqar_batches.h"
#include "train/model_from_config.h"
#include "train/trainer.h"

namespace hyb {

namespace fs = std::filesystem;

TrainRunResult train_run(const RunConfig& rc, const std::string& resume_dir, Communicator* comm) {
  const TrainConfig& tc = *rc.train;
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->size() : 1;
  HYB_CHECK(tc.batch_size % (int64_t(tc.grad_accum) * world) == 0, "train: train.batch_size = ", tc.batch_size,
            " does not split into train.grad_accum = ", tc.grad_accum, " micro-steps on ", world,
            " ranks (batch_size must be a multiple of grad_accum * ranks, config.md 6.2)");
  const int64_t micro = tc.batch_size / (tc.grad_accum * world);

  if (rank == 0)
    spdlog::info("run {} | config_sha256 {} | device {} | precision {} | ranks {}", rc.name, rc.sha256, tc.device.str(),
                 tc.precision, world);
  make_current(tc.device);
  std::unique_ptr<CausalLM> model = build_model(rc, tc.device, tc.seed);
  const LmConfig& mc = model->config();
  int64_t n_params = 0, n_emb = 0;
  for (const auto& p : model->named_parameters()) {
    n_params += p.var.numel();
    if (is_embedding_parameter(p.name)) n_emb += p.var.numel();
  }
  if (rank == 0)
    spdlog::info("model: {} layers, d_model {}, {} parameters ({} non-embedding)", mc.layers.size(), mc.d_model,
                 n_params, n_params - n_emb);

  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<BatchSource> batches;
  ValidateFn validate;
  const Device device = tc.device;
  const DType compute = tc.compute;
  if (rc.data.mqar) {
    const MqarConfig& mq = *rc.data.mqar;
    batches = std::make_unique<MqarBatches>(mq, tc.batch_size, tc.grad_accum, tc.seed, rank, world);
    auto test = std::make_shared<MqarTestSet>(mq);
    validate = [test, mq, micro, device, compute](CausalLM& m, int r, int w) {
      MqarScore s = evaluate_mqar(m, *test, micro, device, compute, r, w);
      ValidationResult v{s.nll_sum(), 0, s.labelled(), 0, s.sums(), nullptr};
      v.task_record = [s, mq](const RecordEnvelope& env, const std::vector<double>& sums) {
        MqarScore total = s;
        total.set_sums(sums);
        spdlog::info("mqar: recall score {:.1f}%", 100 * total.recall_score());
        return mqar_record(total, mq, "", env);
      };
      return v;
    };
  } else {
    DataStreams streams = open_data_streams(rc.data.files.train, rc.data.files.val, rc.data.val_fraction);
    loader = std::make_unique<DataLoader>(streams.train, LoaderOptions{.seq_len = rc.data.seq_len,
                                                                      .batch_size = tc.batch_size,
                                                                      .shuffle = rc.data.shuffle,
                                                                      .seed = tc.seed,
                                                                      .rank = rank,
                                                                      .world_size = world,
                                                                      .vocab_size = mc.real_vocab});
    batches = std::make_unique<LoaderBatches>(*loader, tc.grad_accum);
    if (streams.val.size() > 0) {
      auto windows =
          std::make_shared<EvalWindows>(streams.val, rc.data.seq_len, mc.real_vocab, rc.eval.max_windows.value_or(-1));
      validate = [windows, micro, device, compute](CausalLM& m, int r, int w) {
        // Every window is scored once over the job.
        const auto [first, last] = rank_share(windows->count(), r, w);
        PplResult p = evaluate_ppl(m, *windows, micro, device, compute, first, last - first);
        return ValidationResult{p.nll_sum, p.windows, p.targets, p.correct, {}, nullptr};
      };
    }
  }

  TrainerOptions opt;
  opt.steps = tc.steps;
  opt.grad_accum = tc.grad_accum;
  opt.micro_batch = micro;
  opt.seq_len = rc.data.seq_len;
  opt.adam = tc.optimizer.adam;
  opt.schedule = tc.schedule;
  opt.grad_clip = tc.grad_clip;
  opt.skip_nonfinite = tc.skip_nonfinite;
  opt.nonfinite_max_skips = tc.nonfinite_max_skips;
  opt.log_interval = tc.log_interval;
  opt.eval_interval = tc.eval_interval;
  opt.checkpoint_interval = tc.checkpoint_interval;
  opt.keep_last = int(tc.keep_last);
  opt.out_dir = tc.out_dir;
  opt.device = tc.device;
  opt.compute = tc.compute;
  opt.config_text = rc.resolved.dump(2) + "\n";
  opt.config_sha256 = rc.sha256;
  opt.envelope = {fs::path(tc.out_dir).filename().string(), rc.sha256, 0, tc.seed};
  opt.comm = comm;
  opt.bucket_mb = tc.bucket_mb;
  opt.zero1 = tc.zero1;
  opt.window_p_full = tc.window_p_full;
  opt.param_probes = rc.eval.param_probes;
  check_param_probes(*model, opt.param_probes);

  auto named = model->named_parameters();
  std::vector<ParamSetting> settings = resolve_param_settings(tc.optimizer.weight_decay, tc.optimizer.param_groups, named);
  ParamRule rule = [&](const NamedParameter& p, double* wd, double* lr_mult) {
    for (size_t i = 0; i < named.size(); ++i)
      if (named[i].name == p.name) {
        *wd = settings[i].weight_decay;
        *lr_mult = settings[i].lr_mult;
        return;
      }
    HYB_ASSERT(false, "parameter ", p.name, " without optimizer settings");
  };

  Trainer trainer(*model, *batches, validate, opt, rule);
  if (!resume_dir.empty()) trainer.resume_from(resume_dir);
  trainer.run();
  return {trainer.step(), trainer.last_loss(), trainer.last_val_loss(), bool(validate)};
}

}  // namespace hyb
