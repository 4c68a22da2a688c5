// `hybrid eval mqar --checkpoint DIR [--preset P] [--set PATH=VALUE ...] [--batch B] [--out FILE]`:
// the MQAR recall of a checkpoint (eval.md 4.3) on the test segments of its own data.mqar block, or
// of preset P (eval.md 4.4), whose vocabulary must be the model's. Prints a table per segment and
// the recall score; the `mqar` record goes to DIR/eval.jsonl (or --out).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>

#include "eval/mqar.h"
#include "train/checkpoint_model.h"
#include "train/cli.h"
#include "train/config/config_mqar.h"

namespace hyb {

namespace fs = std::filesystem;

int cmd_eval_mqar(Args& args) {
  const std::string dir = args.value("--checkpoint");
  const std::string preset = args.value("--preset", "");
  std::vector<std::string> sets = args.values("--set");
  const int64_t batch = args.integer("--batch", 32);
  std::string out = args.value("--out", "");
  args.finish();
  LoadedModel lm = load_model_from_checkpoint(dir, sets);
  const RunConfig& rc = lm.config;
  MqarConfig mc;
  if (!preset.empty()) {
    mc = mqar_config_from_json(resolve_mqar(mqar_preset(preset), "--preset"));
  } else {
    HYB_CHECK(rc.data.mqar, "eval mqar: ", dir, " was not trained on MQAR (data.task \"", rc.data.task,
              "\"); give --preset NAME");
    mc = *rc.data.mqar;
  }
  const int64_t vocab = lm.model->config().real_vocab;
  HYB_CHECK(mc.vocab == vocab, "eval mqar: the MQAR vocabulary ", mc.vocab, " differs from the model's vocab_size ", vocab);
  const MqarTestSet test(mc);
  spdlog::info("eval mqar {}: {} segments of {} examples on {}", dir, test.specs.size(), mc.test_examples, lm.device.str());
  lm.model->set_training(false);
  const MqarScore score = evaluate_mqar(*lm.model, test, batch, lm.device, lm.compute);
  std::fputs(mqar_table(score).c_str(), stdout);
  if (out.empty()) out = (fs::path(lm.checkpoint_dir) / "eval.jsonl").string();
  append_record(out, mqar_record(score, mc, preset,
                                 {fs::path(dir).filename().string(), rc.sha256, lm.step, rc.train ? rc.train->seed : 0}));
  return 0;
}

}  // namespace hyb
