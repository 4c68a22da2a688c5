#include "eval/param_probe.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/param_glob.h"
#include "layers/pha/pha.h"

namespace hyb {

std::vector<PhaMixRow> pha_mix_rows(CausalLM& model) {
  std::vector<PhaMixRow> rows;
  const std::vector<Block*>& blocks = model.backbone().blocks();
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto* m = dynamic_cast<const PhaMixer*>(&blocks[i]->mixer());
    if (!m || m->config().sequential) continue;
    const PhaConfig& c = m->config();
    const std::vector<double> w = m->mix_weights();
    PhaMixRow r{int64_t(i)};
    size_t k = 0;
    if (c.attn) r.attn = w[k++];
    if (c.gss) r.gss = w[k++];
    if (c.ffn) r.ffn = w[k++];
    rows.push_back(r);
  }
  return rows;
}

Record pha_mix_record(const std::vector<PhaMixRow>& rows, const RecordEnvelope& env) {
  std::vector<double> layers, attn, gss, ffn;
  for (const PhaMixRow& r : rows) {
    layers.push_back(double(r.layer));
    attn.push_back(r.attn);
    gss.push_back(r.gss);
    ffn.push_back(r.ffn);
  }
  return Record("probe.pha_mix", env).add("layers", layers).add("attn", attn).add("gss", gss).add("ffn", ffn);
}

std::vector<PhaMixLog> read_pha_mix_records(const std::string& metrics_path) {
  std::ifstream f(metrics_path);
  HYB_CHECK(f, "cannot read ", metrics_path);
  std::vector<PhaMixLog> out;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (line.find("\"probe.pha_mix\"") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    HYB_CHECK(!j.is_discarded() && j.value("kind", "") == "probe.pha_mix", metrics_path, ":", n,
              ": not a probe.pha_mix record");
    PhaMixLog log{j.at("step").get<int64_t>(), {}};
    for (size_t i = 0; i < j.at("layers").size(); ++i)
      log.rows.push_back({j["layers"][i].get<int64_t>(), j["attn"][i].get<double>(), j["gss"][i].get<double>(),
                          j["ffn"][i].get<double>()});
    out.push_back(std::move(log));
  }
  return out;
}

std::string pha_mix_table(const std::vector<std::vector<PhaMixRow>>& window) {
  HYB_CHECK(!window.empty() && !window.back().empty(), "pha.mix: no PHA mixing weights to report");
  const size_t L = window.back().size();
  for (const auto& rows : window)
    HYB_CHECK(rows.size() == L, "pha.mix: the logged records disagree on the number of PHA blocks");
  std::string s = "| layer | GSS | Attention | FFN |\n| --- | --- | --- | --- |\n";
  double avg[3] = {0, 0, 0}, max_dev = 0;
  char buf[96];
  for (size_t l = 0; l < L; ++l) {
    double mean[3] = {0, 0, 0}, lo[3] = {1, 1, 1}, hi[3] = {0, 0, 0};
    for (const auto& rows : window) {
      const double w[3] = {rows[l].gss, rows[l].attn, rows[l].ffn};
      for (int k = 0; k < 3; ++k) {
        mean[k] += w[k] / double(window.size());
        lo[k] = std::min(lo[k], w[k]);
        hi[k] = std::max(hi[k], w[k]);
      }
    }
    for (int k = 0; k < 3; ++k) {
      avg[k] += mean[k] / double(L);
      max_dev = std::max(max_dev, hi[k] - lo[k]);
    }
    std::snprintf(buf, sizeof buf, "| L%lld | %.1f | %.1f | %.1f |\n", static_cast<long long>(window.back()[l].layer),
                  100 * mean[0], 100 * mean[1], 100 * mean[2]);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "| Average | %.1f | %.1f | %.1f |\n", 100 * avg[0], 100 * avg[1], 100 * avg[2]);
  s += buf;
  std::snprintf(buf, sizeof buf, "\nwindow_mean over %zu evaluations; window_max_dev %.2f points\n", window.size(),
                100 * max_dev);
  return s + buf;
}

void check_param_probes(const CausalLM& model, const std::vector<std::string>& globs) {
  const std::vector<NamedParameter> params = model.named_parameters();
  for (size_t g = 0; g < globs.size(); ++g) {
    const bool hit = std::any_of(params.begin(), params.end(),
                                 [&](const NamedParameter& p) { return param_glob_matches(globs[g], p.name); });
    HYB_CHECK(hit, "eval.param_probes[", g, "]: expected a glob that matches a parameter, got \"", globs[g],
              "\" (no parameter matches)");
  }
}

std::vector<Record> param_probe_records(const CausalLM& model, const std::vector<std::string>& globs,
                                        const RecordEnvelope& env) {
  std::vector<Record> out;
  for (const NamedParameter& p : model.named_parameters()) {
    if (std::none_of(globs.begin(), globs.end(), [&](const std::string& g) { return param_glob_matches(g, p.name); }))
      continue;
    const std::vector<double> v = p.var.data().to_double_vector();
    Record r("probe.param", env);
    r.add("name", p.name);
    if (v.size() == 1) {
      r.add("value", v[0]);
    } else {
      double sum = 0;
      for (double x : v) sum += x;
      r.add("mean", sum / double(v.size()))
          .add("min", *std::min_element(v.begin(), v.end()))
          .add("max", *std::max_element(v.begin(), v.end()));
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace hyb
