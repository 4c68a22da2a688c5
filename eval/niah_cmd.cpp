// `hybrid eval niah --checkpoint DIR [--haystack brown|filler] [--lengths L...] [--depths P...]
//  [--trials N] [--seed S] [--set PATH=VALUE ...] [--svg FILE] [--out FILE]`: the needle-in-a-haystack
// test of eval.md 5 on a GPT-2 model. Every cell's prompts are built first (a length too short for
// the needle fails before any model time is spent), then each cell runs as one batch of greedy
// continuations through the decode caches, with a progress line per cell. Prints the depth x length
// table and the summary; appends a `niah` record per cell as it finishes and a `niah.summary`
// record to DIR/eval.jsonl (or --out); --svg draws the heat map.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "eval/niah.h"
#include "eval/sampling.h"
#include "train/checkpoint_model.h"
#include "train/cli.h"

namespace hyb {

namespace fs = std::filesystem;

int cmd_eval_niah(Args& args) {
  const std::string dir = args.value("--checkpoint");
  const std::string haystack = args.value("--haystack", "brown");
  std::vector<int64_t> lengths = args.integers("--lengths");
  std::vector<double> depths = args.numbers("--depths");
  const int64_t trials = args.integer("--trials", 20);
  const int64_t seed = args.integer("--seed", 0);
  std::vector<std::string> sets = args.values("--set");
  const std::string svg = args.value("--svg", "");
  std::string out = args.value("--out", "");
  args.finish();
  HYB_CHECK(haystack == "brown" || haystack == "filler", "eval niah: --haystack is brown or filler, got \"", haystack, "\"");
  HYB_CHECK(seed >= 0, "eval niah: --seed must be >= 0, got ", seed);
  LoadedModel lm = load_model_from_checkpoint(dir, sets);
  const RunConfig& rc = lm.config;
  auto tok = make_tokenizer("gpt2");
  HYB_CHECK(lm.model->config().real_vocab == tok->vocab_size(), "eval niah: ", dir, "'s model reads ",
            lm.model->config().real_vocab, " token ids, not GPT-2's ", tok->vocab_size(),
            ": the needle test's keys and numbers are GPT-2 tokens");
  const int64_t T_train = rc.data.seq_len;
  const NiahGrid grid{lengths.empty() ? niah_default_lengths(T_train) : lengths,
                      depths.empty() ? niah_default_depths() : depths, trials, uint64_t(seed)};
  check_niah_grid(grid);
  const NiahHaystack hay =
      haystack == "brown" ? niah_brown_haystack(*tok) : niah_filler_haystack(*tok, grid.lengths.back());
  NiahPrompts prompts(*tok, hay.tokens);
  std::vector<NiahCell> cells = make_niah_cells(prompts, grid);
  spdlog::info("eval niah {}: {} lengths x {} depths x {} trials, haystack {} ({} tokens), T_train {}, on {}", dir,
               grid.lengths.size(), grid.depths.size(), trials, hay.name, hay.tokens.size(), T_train, lm.device.str());

  lm.model->set_training(false);
  const NiahDecoder decode = [&](const std::vector<std::vector<int32_t>>& p) {
    return greedy_decode(*lm.model, p, kNiahNewTokens, lm.device, lm.compute);
  };
  if (out.empty()) out = (fs::path(lm.checkpoint_dir) / "eval.jsonl").string();
  const RecordEnvelope env{fs::path(dir).filename().string(), rc.sha256, lm.step, rc.train ? rc.train->seed : 0};
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t c = 0; c < cells.size(); ++c) {
    NiahCell& cell = cells[c];
    score_niah_cell(cell, decode, *tok);
    append_record(out, niah_cell_record(cell, env));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string example = nlohmann::json(cell.generated[0]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    spdlog::info("niah [{}/{}] L {} depth {}%: {}/{} correct ({:.1f}%), actual depth {:.3f}; e.g. {} -> {}; {:.1f} s",
                 c + 1, cells.size(), cell.L, cell.depth_percent, cell.correct, cell.trials.size(), 100 * cell.acc(),
                 cell.depth_actual_mean(), cell.trials[0].number, example, s);
  }

  const NiahSummary sum = summarize_niah(cells, T_train);
  std::fputs(niah_table(cells, grid, T_train).c_str(), stdout);
  auto pct = [](double a) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%.1f%%", 100 * a);
    return std::isfinite(a) ? std::string(buf) : std::string("—");  // no cell on that side of T_train
  };
  std::printf("\nacc_in %s  acc_out %s  acc_all %s  (%zu cells of %lld trials, haystack %s)\n", pct(sum.acc_in).c_str(),
              pct(sum.acc_out).c_str(), pct(sum.acc_all).c_str(), cells.size(), static_cast<long long>(trials),
              hay.name.c_str());
  if (!sum.locality_checked)
    spdlog::warn("eval niah: no locality check: the grid has no depth 100% (eval.md 5.3)");
  else if (sum.no_local_copy())
    spdlog::warn("eval niah: flag no_local_copy: the cell (L {}, depth 100%) scored {:.1f}% < 50%, so the model cannot "
                 "copy even the adjacent needle and the heat map says nothing about long-range retrieval",
                 grid.lengths[0], 100 * sum.locality_acc);
  append_record(out, niah_summary_record(sum, hay, T_train, grid.seed, env));
  if (!svg.empty()) {
    write_file_atomic(svg, render_svg(niah_heat_map(cells, grid, T_train)));
    std::printf("wrote %s\n", svg.c_str());
  }
  return 0;
}

}  // namespace hyb
