// The NHA long-term ratio probe `nha.omega_l` (eval.md 6.1): every NHA layer's omega_L (the share
// of its softmax mass on the slots; the long branch's coefficient under a weighted fusion) averaged
// per layer, per (layer, head) and per (layer, position bucket) over evaluation windows, in fp64.
//   OmegaProbe p = probe_omega_l(*lm.model, windows, T, 8, device, compute, 4);
//   append_record(path, omega_record(p, envelope));  write_file_atomic(svg, render_svg(omega_heat_map(p)));
#pragma once
#include "data/loader.h"
#include "eval/records.h"
#include "eval/svg_plot.h"
#include "layers/model/causal_lm.h"

namespace hyb {

struct OmegaLayer {
  int64_t index, window, slots;
  bool full_window;        // w >= the evaluation window (or -1): greyed in NHA's figure
  std::string definition;  // "softmax_mass" or "fusion_coefficient"
};

struct OmegaProbe {
  std::vector<OmegaLayer> layers;                         // the model's NHA layers
  std::vector<double> by_layer;                           // mean over tokens and heads
  std::vector<std::vector<double>> by_layer_head;         // [layer][head]
  std::vector<std::vector<double>> by_layer_bucket;       // [layer][bucket]
  int64_t bucket_width = 1, tokens = 0, T = 0;
};

// Runs the windows `batch` at a time; throws naming the probe when the model has no NHA layer.
// T is the windows' length (data.seq_len).
OmegaProbe probe_omega_l(CausalLM& model, const EvalWindows& windows, int64_t T, int64_t batch, Device device,
                         DType compute, int64_t bucket_width);
// Record kind "probe.omega_l" with the fields of eval.md 6.1.
Record omega_record(const OmegaProbe& p, const RecordEnvelope& env);
// The layer x position-bucket heat map on the viridis map, scale [0, 1].
HeatMap omega_heat_map(const OmegaProbe& p);

}  // namespace hyb
