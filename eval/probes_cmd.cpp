// `hybrid eval probes --checkpoint DIR [--window K]`: the PHA mixing weights of a checkpoint as the PHA
// paper's Table 9 (eval.md 6.3): window_mean over the last K probe.pha_mix records its run logged up to
// the checkpoint's step (default 5), or the checkpoint's own weights when the run logged none (a run
// trained without validation, a checkpoint copied out of its run).
#include <cstdio>
#include <filesystem>

#include "eval/param_probe.h"
#include "train/checkpoint_model.h"
#include "train/cli.h"

namespace hyb {

namespace fs = std::filesystem;

int cmd_eval_probes(Args& args) {
  const std::string dir = args.value("--checkpoint");
  const int64_t K = args.integer("--window", 5);
  args.finish();
  HYB_CHECK(K >= 1, "eval probes: --window: expected an integer >= 1, got ", K);
  LoadedModel lm = load_model_from_checkpoint(dir, {});
  const std::vector<PhaMixRow> own = pha_mix_rows(*lm.model);
  HYB_CHECK(!own.empty(), "eval probes: ", lm.checkpoint_dir, " has no parallel PHA block with mixing weights (pha.mix)");
  std::vector<std::vector<PhaMixRow>> window;
  const fs::path metrics = fs::path(lm.checkpoint_dir).parent_path().parent_path() / "metrics.jsonl";
  if (fs::exists(metrics))
    for (const PhaMixLog& log : read_pha_mix_records(metrics.string()))
      if (log.step <= lm.step) window.push_back(log.rows);
  if (int64_t(window.size()) > K) window.erase(window.begin(), window.end() - K);
  const bool logged = !window.empty();
  if (!logged) window.push_back(own);
  std::printf("pha.mix of %s (step %lld), %s\n\n%s", lm.checkpoint_dir.c_str(), static_cast<long long>(lm.step),
              logged ? "from its run's metrics.jsonl" : "from the checkpoint's weights (the run logged no pha.mix)",
              pha_mix_table(window).c_str());
  return 0;
}

}  // namespace hyb
