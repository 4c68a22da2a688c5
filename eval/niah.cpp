#include "eval/niah.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace hyb {

namespace {

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool ascii_digit(char c) { return c >= '0' && c <= '9'; }

std::string percent(double acc, const char* format) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), format, 100 * acc);
  return buf;
}

// Mean of the cell accuracies that pass `keep`; NaN when none does.
template <typename Keep>
double mean_acc(const std::vector<NiahCell>& cells, Keep keep) {
  double sum = 0;
  int64_t n = 0;
  for (const NiahCell& c : cells)
    if (keep(c)) {
      sum += c.acc();
      ++n;
    }
  return n ? sum / double(n) : std::nan("");
}

}  // namespace

std::string niah_answer(std::string_view generated) {
  size_t a = 0;
  while (a < generated.size() && ascii_space(generated[a])) ++a;
  size_t b = a;
  while (b < generated.size() && ascii_digit(generated[b])) ++b;
  return std::string(generated.substr(a, b - a));
}

bool niah_correct(std::string_view generated, const std::string& number) { return niah_answer(generated) == number; }

std::vector<int64_t> niah_default_lengths(int64_t T_train) {
  std::vector<int64_t> out;
  for (double f : {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0})
    out.push_back(8 * int64_t(std::lround(f * double(T_train) / 8)));
  return out;
}

std::vector<double> niah_default_depths() {
  std::vector<double> out;
  for (int p = 0; p <= 100; p += 10) out.push_back(p);
  return out;
}

void check_niah_grid(const NiahGrid& g) {
  HYB_CHECK(!g.lengths.empty(), "eval niah: --lengths is empty");
  HYB_CHECK(!g.depths.empty(), "eval niah: --depths is empty");
  HYB_CHECK(g.trials >= 1, "eval niah: --trials must be >= 1, got ", g.trials);
  for (size_t j = 0; j < g.lengths.size(); ++j)
    HYB_CHECK(g.lengths[j] >= 1 && (j == 0 || g.lengths[j] > g.lengths[j - 1]),
              "eval niah: --lengths must be positive and increasing, got ", g.lengths[j], " at position ", j);
  for (size_t k = 0; k < g.depths.size(); ++k)
    HYB_CHECK(g.depths[k] >= 0 && g.depths[k] <= 100 && (k == 0 || g.depths[k] > g.depths[k - 1]),
              "eval niah: --depths are percents, increasing in [0, 100], got ", g.depths[k], " at position ", k);
}

double NiahCell::depth_actual_mean() const {
  double sum = 0;
  for (const NiahTrial& t : trials) sum += t.depth();
  return trials.empty() ? 0.0 : sum / double(trials.size());
}

std::vector<NiahCell> make_niah_cells(NiahPrompts& prompts, const NiahGrid& g) {
  check_niah_grid(g);
  std::vector<NiahCell> cells;
  for (size_t j = 0; j < g.lengths.size(); ++j)
    for (size_t k = 0; k < g.depths.size(); ++k) {
      NiahCell c;
      c.j = int64_t(j);
      c.k = int64_t(k);
      c.L = g.lengths[j];
      c.depth_percent = g.depths[k];
      RngStream rng(g.seed, str_cat("niah/", j, "/", k));
      for (int64_t t = 0; t < g.trials; ++t) c.trials.push_back(prompts.trial(c.L, c.depth_percent, rng));
      cells.push_back(std::move(c));
    }
  return cells;
}

void score_niah_cell(NiahCell& cell, const NiahDecoder& decode, const Tokenizer& tok) {
  std::vector<std::vector<int32_t>> prompts;
  for (const NiahTrial& t : cell.trials) prompts.push_back(t.prompt);
  const std::vector<std::vector<int32_t>> out = decode(prompts);
  HYB_ASSERT(out.size() == cell.trials.size(), "the decoder answered ", out.size(), " of ", cell.trials.size(), " prompts");
  cell.generated.clear();
  cell.correct = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    cell.generated.push_back(tok.decode(out[i]));
    cell.correct += niah_correct(cell.generated.back(), cell.trials[i].number);
  }
}

NiahSummary summarize_niah(const std::vector<NiahCell>& cells, int64_t T_train) {
  NiahSummary s;
  s.acc_in = mean_acc(cells, [&](const NiahCell& c) { return c.L <= T_train; });
  s.acc_out = mean_acc(cells, [&](const NiahCell& c) { return c.L > T_train; });
  s.acc_all = mean_acc(cells, [](const NiahCell&) { return true; });
  for (const NiahCell& c : cells)
    if (c.j == 0 && c.depth_percent == 100) {
      s.locality_checked = true;
      s.locality_acc = c.acc();
    }
  return s;
}

Record niah_cell_record(const NiahCell& c, const RecordEnvelope& env) {
  Record r("niah", env);
  return r.add("L", c.L)
      .add("depth", c.depth_percent / 100)
      .add("depth_actual_mean", c.depth_actual_mean())
      .add("trials", int64_t(c.trials.size()))
      .add("correct", c.correct)
      .add("acc", c.acc());
}

Record niah_summary_record(const NiahSummary& s, const NiahHaystack& hay, int64_t T_train, uint64_t prompt_seed,
                           const RecordEnvelope& env) {
  Record r("niah.summary", env);
  return r.add("acc_in", s.acc_in)
      .add("acc_out", s.acc_out)
      .add("acc_all", s.acc_all)
      .add_raw("flags", s.no_local_copy() ? "[\"no_local_copy\"]" : "[]")
      .add("haystack", hay.name)
      .add("haystack_sha256", hay.sha256)
      .add("T_train", T_train)
      .add("prompt_seed", int64_t(prompt_seed));
}

std::string niah_table(const std::vector<NiahCell>& cells, const NiahGrid& g, int64_t T_train) {
  std::string out = "| depth |", rule = "| --- |";
  bool beyond = false;
  for (int64_t L : g.lengths) {
    out += str_cat(" ", L, L > T_train ? "*" : "", " |");
    rule += " --- |";
    beyond |= L > T_train;
  }
  out += "\n" + rule + "\n";
  for (size_t k = 0; k < g.depths.size(); ++k) {
    out += str_cat("| ", g.depths[k], "% |");
    for (const NiahCell& c : cells)
      if (c.k == int64_t(k)) out += " " + percent(c.acc(), "%.1f%%") + " |";
    out += "\n";
  }
  if (beyond) out += str_cat("\n* beyond the training length T_train = ", T_train, "\n");
  return out;
}

HeatMap niah_heat_map(const std::vector<NiahCell>& cells, const NiahGrid& g, int64_t T_train) {
  HeatMap h;
  h.title = "needle in a haystack: accuracy";
  h.x_label = "context length (tokens)";
  h.y_label = "needle depth";
  h.colormap = "ryg";
  h.values.assign(g.depths.size(), std::vector<double>(g.lengths.size(), std::nan("")));
  h.cell_text.assign(g.depths.size(), std::vector<std::string>(g.lengths.size()));
  for (const NiahCell& c : cells) {
    h.values[size_t(c.k)][size_t(c.j)] = c.acc();
    h.cell_text[size_t(c.k)][size_t(c.j)] = percent(c.acc(), "%.0f%%");
  }
  for (int64_t L : g.lengths) h.x_ticks.push_back(std::to_string(L));
  for (double d : g.depths) h.y_ticks.push_back(str_cat(d, "%"));
  for (size_t j = 1; j < g.lengths.size(); ++j)
    if (g.lengths[j - 1] <= T_train && g.lengths[j] > T_train) h.divider = int64_t(j);
  return h;
}

}  // namespace hyb
