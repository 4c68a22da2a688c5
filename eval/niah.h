// The needle test's grid, scoring and output (eval.md 5.2 to 5.4): cells of (length L_j, depth d_k),
// each with its trials drawn from stream niah/{j}/{k} and run as one batch of greedy continuations;
// a trial is correct when the generated text, leading white space removed, starts with exactly the
// number's digits. The model is a NiahDecoder, so a test can put an oracle in its place.
//   NiahGrid grid{niah_default_lengths(T_train), niah_default_depths(), 20, seed};
//   std::vector<NiahCell> cells = make_niah_cells(prompts, grid);
//   for (NiahCell& c : cells) score_niah_cell(c, decoder, *tok);
//   NiahSummary s = summarize_niah(cells, T_train);
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/niah_prompt.h"
#include "eval/records.h"
#include "eval/svg_plot.h"

namespace hyb {

inline constexpr int64_t kNiahNewTokens = 8;  // G

// The answer of 5.2: the generated text without its leading white space, cut to its longest prefix
// of ASCII digits ("" when it starts otherwise).
std::string niah_answer(std::string_view generated);
// Exact match: a longer or shorter digit string is wrong.
bool niah_correct(std::string_view generated, const std::string& number);

struct NiahGrid {
  std::vector<int64_t> lengths;  // L_j in tokens, increasing
  std::vector<double> depths;    // d_k in percent, increasing, in [0, 100]
  int64_t trials = 20;           // per cell
  uint64_t seed = 0;             // of the streams niah/{j}/{k}
};
// L_j = 8 round(f_j T_train / 8) for f_j = 0.25, 0.5, ..., 2.
std::vector<int64_t> niah_default_lengths(int64_t T_train);
std::vector<double> niah_default_depths();  // 0, 10, ..., 100
// Throws naming the flag when lengths or depths are empty, out of range or not increasing.
void check_niah_grid(const NiahGrid& g);

struct NiahCell {
  int64_t j = 0, k = 0;  // indices into the grid's lengths and depths
  int64_t L = 0;
  double depth_percent = 0;
  std::vector<NiahTrial> trials;
  std::vector<std::string> generated;  // the decoded continuation of each trial, once scored
  int64_t correct = 0;
  double acc() const { return trials.empty() ? 0.0 : double(correct) / double(trials.size()); }
  double depth_actual_mean() const;
};

// Every cell's trials, lengths outer and depths inner; a length too short for the needle fails
// here, before any model time is spent.
std::vector<NiahCell> make_niah_cells(NiahPrompts& prompts, const NiahGrid& g);

// The model as the needle test sees it: prompts of one length in, kNiahNewTokens greedy ids per
// prompt out (eval/sampling.h: greedy_decode through the decode caches).
using NiahDecoder = std::function<std::vector<std::vector<int32_t>>(const std::vector<std::vector<int32_t>>& prompts)>;

// Runs the cell's trials as one batch and counts the correct ones.
void score_niah_cell(NiahCell& cell, const NiahDecoder& decode, const Tokenizer& tok);

struct NiahSummary {
  double acc_in = 0, acc_out = 0, acc_all = 0;  // mean cell accuracy over L <= T_train, L > T_train, all;
                                                // NaN (written null) when there is no such cell
  bool locality_checked = false;                // the grid has the cell (L_0, 100%)
  double locality_acc = 0;
  bool no_local_copy() const { return locality_checked && locality_acc < 0.5; }
};
NiahSummary summarize_niah(const std::vector<NiahCell>& cells, int64_t T_train);

// Kind "niah", one per cell: L, depth (a fraction), depth_actual_mean, trials, correct, acc.
Record niah_cell_record(const NiahCell& c, const RecordEnvelope& env);
// Kind "niah.summary": acc_in, acc_out, acc_all, flags, then what makes two runs comparable:
// haystack, haystack_sha256, T_train, prompt_seed.
Record niah_summary_record(const NiahSummary& s, const NiahHaystack& hay, int64_t T_train, uint64_t prompt_seed,
                           const RecordEnvelope& env);
// Depth rows x length columns in percent (eval.md 8.2), lengths beyond T_train marked.
std::string niah_table(const std::vector<NiahCell>& cells, const NiahGrid& g, int64_t T_train);
// The heat map of 5.4: ryg accuracy, 0% depth on top, the percent in each cell, a dashed line where
// the lengths pass T_train.
HeatMap niah_heat_map(const std::vector<NiahCell>& cells, const NiahGrid& g, int64_t T_train);

}  // namespace hyb
