#include "eval/omega_probe.h"

#include <nlohmann/json.hpp>

#include "layers/nha/nha.h"

namespace hyb {

namespace {

std::string json_matrix(const std::vector<std::vector<double>>& m) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& row : m) j.push_back(row);
  return j.dump();
}

}  // namespace

OmegaProbe probe_omega_l(CausalLM& model, const EvalWindows& windows, int64_t T, int64_t batch, Device device,
                         DType compute, int64_t bucket_width) {
  HYB_CHECK(bucket_width >= 1, "probe nha.omega_l: --bucket must be >= 1, got ", bucket_width);
  OmegaProbe p;
  p.T = T;
  p.bucket_width = bucket_width;
  std::vector<NhaMixer*> nha;
  auto& blocks = model.backbone().blocks();
  for (size_t i = 0; i < blocks.size(); ++i)
    if (auto* m = dynamic_cast<NhaMixer*>(&blocks[i]->mixer())) {
      const NhaConfig& c = m->config();
      const int64_t keys = c.window_keys();
      p.layers.push_back({int64_t(i), c.window, c.slots, keys < 0 || keys >= p.T,
                          c.fusion == "softmax" ? "softmax_mass" : "fusion_coefficient"});
      nha.push_back(m);
    }
  HYB_CHECK(!nha.empty(), "probe nha.omega_l: the model has no nha layer");
  const int64_t L = int64_t(nha.size()), nb = (p.T + bucket_width - 1) / bucket_width;
  std::vector<std::vector<double>> head_sum(static_cast<size_t>(L)),
      bucket_sum(static_cast<size_t>(L), std::vector<double>(static_cast<size_t>(nb), 0.0));
  std::vector<double> bucket_count(static_cast<size_t>(nb), 0.0);
  for (int64_t l = 0; l < L; ++l) head_sum[size_t(l)].assign(size_t(nha[size_t(l)]->config().num_heads), 0.0);
  for (NhaMixer* m : nha) m->set_emit_long_ratio(true);
  NoGradGuard no_grad;
  for (int64_t first = 0; first < windows.count(); first += batch) {
    const int64_t n = std::min(batch, windows.count() - first);
    const Batch b = windows.batch(first, n);
    model.logits(b.inputs.to(device), compute);
    for (int64_t l = 0; l < L; ++l) {
      const Tensor& om = nha[size_t(l)]->long_ratio();  // (n, T, Hl)
      const int64_t Hl = om.size(2);
      const std::vector<double> v = om.to_double_vector();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t t = 0; t < p.T; ++t)
          for (int64_t h = 0; h < Hl; ++h) {
            const double x = v[size_t((i * p.T + t) * Hl + h)];
            head_sum[size_t(l)][size_t(h)] += x;
            bucket_sum[size_t(l)][size_t(t / bucket_width)] += x / double(Hl);
          }
    }
    for (int64_t t = 0; t < p.T; ++t) bucket_count[size_t(t / bucket_width)] += double(n);
    p.tokens += n * p.T;
  }
  for (NhaMixer* m : nha) m->set_emit_long_ratio(false);
  for (int64_t l = 0; l < L; ++l) {
    double total = 0;
    std::vector<double> heads = head_sum[size_t(l)];
    for (double& x : heads) {
      total += x;
      x /= double(p.tokens);
    }
    p.by_layer.push_back(total / double(p.tokens * int64_t(heads.size())));
    p.by_layer_head.push_back(heads);
    std::vector<double> buckets = bucket_sum[size_t(l)];
    for (int64_t k = 0; k < nb; ++k) buckets[size_t(k)] /= bucket_count[size_t(k)];
    p.by_layer_bucket.push_back(buckets);
  }
  return p;
}

Record omega_record(const OmegaProbe& p, const RecordEnvelope& env) {
  nlohmann::json layers = nlohmann::json::array();
  for (const OmegaLayer& l : p.layers)
    layers.push_back({{"index", l.index}, {"window", l.window}, {"slots", l.slots}, {"full_window", l.full_window},
                      {"definition", l.definition}});
  Record r("probe.omega_l", env);
  r.add("probe", "nha.omega_l")
      .add_raw("layers", layers.dump())
      .add("by_layer", p.by_layer)
      .add_raw("by_layer_head", json_matrix(p.by_layer_head))
      .add_raw("by_layer_bucket", json_matrix(p.by_layer_bucket))
      .add("bucket_width", p.bucket_width)
      .add("T", p.T)
      .add("tokens", p.tokens);
  return r;
}

HeatMap omega_heat_map(const OmegaProbe& p) {
  HeatMap h;
  h.title = "NHA long-term ratio omega_L";
  h.x_label = "position";
  h.y_label = "layer";
  const size_t nb = p.by_layer_bucket.empty() ? 0 : p.by_layer_bucket[0].size();
  for (size_t k = 0; k < nb; ++k) h.x_ticks.push_back(std::to_string(int64_t(k) * p.bucket_width));
  for (size_t l = 0; l < p.layers.size(); ++l) {
    h.y_ticks.push_back(str_cat(p.layers[l].index, p.layers[l].full_window ? " (full)" : ""));
    h.values.push_back(p.by_layer_bucket[l]);
  }
  h.lo = 0;
  h.hi = 1;
  h.colormap = "viridis5";
  return h;
}

}  // namespace hyb
