// `hybrid eval --checkpoint DIR [--data SHARD...] [--set PATH=VALUE ...] [--max-windows M] [--batch B]
//  [--out FILE] [--omega-l [--bucket W] [--svg FILE]]`: loss, perplexity, token accuracy and bits per byte of
// a checkpoint (eval.md 2) on the config's validation split or the shards given; with --omega-l also
// the NHA long-term ratio probe on the same windows (eval.md 6.1: a probe.omega_l record, and with
// --svg the layer x position heat map). --set applies to the checkpoint's resolved config
// before the model is built (a layer's window can change; a shape change fails at load naming the
// tensor). The record goes to DIR/eval.jsonl (or --out). `hybrid eval mqar ...` is the MQAR recall
// evaluation (eval/mqar_cmd.cpp), `hybrid eval niah ...` the needle test (eval/niah_cmd.cpp);
// `hybrid eval probes ...` the PHA mixing table (eval/probes_cmd.cpp); `hybrid eval ppl ...` names
// this default.
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>

#include "data/loader.h"
#include "data/tokenizer.h"
#include "core/safetensors.h"
#include "eval/omega_probe.h"
#include "eval/perplexity.h"
#include "eval/records.h"
#include "train/checkpoint.h"
#include "train/checkpoint_model.h"
#include "train/cli.h"

namespace hyb {

namespace fs = std::filesystem;

int cmd_eval_mqar(Args& args);
int cmd_eval_niah(Args& args);
int cmd_eval_probes(Args& args);

int cmd_eval(Args& args) {
  const std::optional<std::string> sub = args.subcommand();
  if (sub == "mqar") return cmd_eval_mqar(args);
  if (sub == "niah") return cmd_eval_niah(args);
  if (sub == "probes") return cmd_eval_probes(args);
  HYB_CHECK(!sub || sub == "ppl", "eval: unknown evaluation \"", *sub, "\" (ppl, mqar, niah or probes)");
  const std::string dir = args.value("--checkpoint");
  std::vector<std::string> data = args.values("--data");
  std::vector<std::string> sets = args.values("--set");
  const int64_t max_windows = args.integer("--max-windows", -1);
  const int64_t batch = args.integer("--batch", 8);
  std::string out = args.value("--out", "");
  const bool omega = args.flag("--omega-l");
  const int64_t bucket = args.integer("--bucket", 0);
  const std::string svg = args.value("--svg", "");
  args.finish();
  HYB_CHECK(omega || (bucket == 0 && svg.empty()), "eval: --bucket and --svg go with --omega-l");
  LoadedModel lm = load_model_from_checkpoint(dir, sets, /*check_files=*/data.empty());
  const RunConfig& rc = lm.config;
  TokenStream stream;
  if (data.empty()) {
    stream = open_data_streams(rc.data.files.train, rc.data.files.val, rc.data.val_fraction).val;
    HYB_CHECK(stream.size() > 0, "eval: ", dir, "'s config has no validation split; give --data SHARD...");
  } else {
    stream = open_data_streams(data, {}, 0.0).train;
  }
  const int64_t T = rc.data.seq_len;
  EvalWindows windows(stream, T, lm.model->config().real_vocab,
                      max_windows >= 0 ? max_windows : rc.eval.max_windows.value_or(-1));
  HYB_CHECK(windows.count() > 0, "eval: the validation stream holds no window of ", T + 1, " tokens");
  spdlog::info("eval {}: {} windows of {} tokens on {}", dir, windows.count(), T, lm.device.str());
  PplResult r = evaluate_ppl(*lm.model, windows, batch, lm.device, lm.compute);
  auto tok = make_tokenizer(rc.data.tokenizer);
  double bytes = 0;
  for (int64_t first = 0; first < windows.count(); first += 64) {
    Batch b = windows.batch(first, std::min<int64_t>(64, windows.count() - first));
    for (double id : b.targets.to_double_vector()) bytes += double(tok->byte_length(int32_t(id)));
  }
  const double bpb = r.nll_sum / (std::log(2.0) * bytes);
  std::printf("loss %.4f  ppl %.2f  token_acc %.2f%%  bits_per_byte %.4f  (%lld windows, %lld targets)\n", r.loss(),
              std::exp(r.loss()), 100 * r.token_acc(), bpb, static_cast<long long>(r.windows),
              static_cast<long long>(r.targets));
  if (out.empty()) out = (fs::path(lm.checkpoint_dir) / "eval.jsonl").string();
  append_record(out, ppl_record({fs::path(dir).filename().string(), rc.sha256, lm.step, rc.train ? rc.train->seed : 0},
                                data.empty() ? "val" : "data", T, r, bpb));
  if (omega) {
    const OmegaProbe p = probe_omega_l(*lm.model, windows, T, batch, lm.device, lm.compute,
                                       bucket > 0 ? bucket : std::max<int64_t>(1, T / 32));
    for (size_t l = 0; l < p.layers.size(); ++l)
      std::printf("omega_L layer %lld%s: %.4f\n", static_cast<long long>(p.layers[l].index),
                  p.layers[l].full_window ? " (full window)" : "", p.by_layer[l]);
    append_record(out, omega_record(p, {fs::path(dir).filename().string(), rc.sha256, lm.step, rc.train ? rc.train->seed : 0}));
    if (!svg.empty()) write_file_atomic(svg, render_svg(omega_heat_map(p)));
  }
  return 0;
}

}  // namespace hyb
