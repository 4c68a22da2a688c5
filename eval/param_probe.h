// Parameter probes (eval.md 6.3): values read off the weights, no data. `pha.mix` is every PHA
// block's mixing weights w = softplus(p) / sum softplus(p) (pha.md 6.4), logged by the trainer at each
// validation and printed as the PHA paper's Table 9; the generic probe logs every parameter that a
// glob of `eval.param_probes` matches (a scalar's value; mean, min and max otherwise).
//   auto rows = pha_mix_rows(model);                         // empty when the model has no PHA block
//   append_record(path, pha_mix_record(rows, env));
//   std::printf("%s", pha_mix_table(window).c_str());        // window: the last K logged row sets
#pragma once
#include <string>
#include <vector>

#include "eval/records.h"
#include "layers/model/causal_lm.h"

namespace hyb {

// One PHA block's weights; a branch the block does not keep has weight 0.
struct PhaMixRow {
  int64_t layer = 0;
  double attn = 0, gss = 0, ffn = 0;
};

std::vector<PhaMixRow> pha_mix_rows(CausalLM& model);
// Record kind "probe.pha_mix": layers, attn, gss, ffn (fractions, one per PHA block).
Record pha_mix_record(const std::vector<PhaMixRow>& rows, const RecordEnvelope& env);
struct PhaMixLog {
  int64_t step = 0;
  std::vector<PhaMixRow> rows;
};
// Every probe.pha_mix record of a metrics file, oldest first.
std::vector<PhaMixLog> read_pha_mix_records(const std::string& metrics_path);
// Table 9's layout over a window of logged row sets (the newest last): per layer GSS, Attention, FFN in
// percent with one decimal, the mean over the window, an Average row, and window_max_dev, the largest
// change of any weight over the window, in percentage points.
std::string pha_mix_table(const std::vector<std::vector<PhaMixRow>>& window);

// Throws naming eval.param_probes[i] for a glob that matches no parameter.
void check_param_probes(const CausalLM& model, const std::vector<std::string>& globs);
// Record kind "probe.param" per matched parameter: name, and value (one element) or mean, min, max.
std::vector<Record> param_probe_records(const CausalLM& model, const std::vector<std::string>& globs,
                                        const RecordEnvelope& env);

}  // namespace hyb
