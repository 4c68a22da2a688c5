// `hybrid train --config FILE [--set PATH=VALUE ...] [--resume DIR]`: one process, one device.
// The config is resolved (config.md 3.6), the model built and initialised from the run's seed, the
// data opened, and the Trainer runs; with --resume the newest complete checkpoint under DIR (or DIR
// itself, when it is one) restores weights, optimizer, data cursor and schedule, and the resolved
// config must hash as the checkpoint's did.
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>

#include "data/loader.h"
#include "eval/perplexity.h"
#include "train/checkpoint.h"
#include "train/checkpoint_model.h"
#include "train/cli.h"
#include "train/config/config_param_groups.h"
#include "train/config/config_resolve.h"
#include "train/loader_batches.h"
#include "train/model_from_config.h"
#include "train/trainer.h"

namespace hyb {

namespace fs = std::filesystem;

int cmd_train(Args& args) {
  auto config = args.get("--config");
  auto resume = args.get("--resume");
  std::vector<std::string> sets = args.values("--set");
  args.finish();
  std::string ckpt;
  if (resume) ckpt = resolve_checkpoint_dir(*resume);
  HYB_CHECK(config || resume, "train: give --config FILE (or --resume DIR to continue a run from its own config)");
  RunConfig rc = load_run_config(config ? *config : ckpt + "/config.json", sets);
  const TrainConfig& tc = *rc.train;
  HYB_CHECK(rc.data.task == "lm", "train: data.task \"", rc.data.task, "\" is not supported by this trainer yet");

  const std::string out_dir = tc.out_dir;
  HYB_CHECK(resume || list_checkpoints((fs::path(out_dir) / "ckpt").string()).empty(), "train: ", out_dir,
            " already holds checkpoints of a run; continue it with --resume ", out_dir,
            ", or set train.out_dir (or name) to start another");
  spdlog::info("run {} | config_sha256 {} | device {} | precision {}", rc.name, rc.sha256, tc.device.str(), tc.precision);
  std::unique_ptr<CausalLM> model = build_model(rc, tc.device, tc.seed);
  const LmConfig& mc = model->config();
  int64_t n_params = 0, n_emb = 0;
  for (const auto& p : model->named_parameters()) {
    n_params += p.var.numel();
    if (p.name == "model.embeddings.weight" || p.name == "lm_head.weight") n_emb += p.var.numel();
  }
  spdlog::info("model: {} layers, d_model {}, {} parameters ({} non-embedding)", mc.layers.size(), mc.d_model, n_params,
               n_params - n_emb);

  DataStreams streams = open_data_streams(rc.data.files.train, rc.data.files.val, rc.data.val_fraction);
  DataLoader loader(streams.train, {.seq_len = rc.data.seq_len,
                                    .batch_size = tc.batch_size,
                                    .shuffle = rc.data.shuffle,
                                    .seed = tc.seed,
                                    .rank = 0,
                                    .world_size = 1,
                                    .vocab_size = mc.real_vocab});
  LoaderBatches batches(loader, tc.grad_accum);
  const int64_t micro = tc.batch_size / tc.grad_accum;
  ValidateFn validate;
  if (streams.val.size() > 0) {
    auto windows = std::make_shared<EvalWindows>(streams.val, rc.data.seq_len, mc.real_vocab, rc.eval.max_windows.value_or(-1));
    validate = [windows, micro, &tc](CausalLM& m) {
      PplResult r = evaluate_ppl(m, *windows, micro, tc.device, tc.compute);
      return ValidationResult{r.loss(), r.windows, r.targets, r.token_acc()};
    };
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
  opt.out_dir = out_dir;
  opt.device = tc.device;
  opt.compute = tc.compute;
  opt.config_text = rc.resolved.dump(2) + "\n";
  opt.config_sha256 = rc.sha256;
  opt.envelope = {fs::path(out_dir).filename().string(), rc.sha256, 0, tc.seed};

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

  Trainer trainer(*model, batches, validate, opt, rule);
  if (resume) trainer.resume_from(ckpt);
  trainer.run();
  if (validate) {
    std::printf("final val_loss %.4f (ppl %.2f) after %lld steps\n", trainer.last_val_loss(),
                std::exp(trainer.last_val_loss()), static_cast<long long>(trainer.step()));
  } else {
    std::printf("final train loss %.4f after %lld steps\n", trainer.last_loss(), static_cast<long long>(trainer.step()));
  }
  return 0;
}

}  // namespace hyb
