// `hybrid plot METRICS.jsonl [-o loss.svg]`: train and validation loss against the step, from the
// records a training run writes (kinds "train" and "ppl").
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "eval/svg_plot.h"
#include "train/cli.h"

namespace hyb {

int cmd_plot(Args& args) {
  std::string out = args.value("-o", "");
  auto pos = args.positional();
  args.finish();
  HYB_CHECK(pos.size() == 1, "plot: expected one metrics file, got ", pos.size(), " (usage: hybrid plot METRICS.jsonl -o loss.svg)");
  const std::string& path = pos[0];
  if (out.empty()) out = path.substr(0, path.rfind('.')) + ".svg";
  std::ifstream in(path);
  HYB_CHECK(in, path, ": cannot open");
  LinePlot p{"loss", "step", "loss (nats/token)", {{"train", {}, {}}, {"val", {}, {}}}};
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json r;
    try {
      r = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(str_cat(path, ":", n, ": invalid JSON: ", e.what()));
    }
    const std::string kind = r.value("kind", "");
    if (!r.contains("loss") || !r["loss"].is_number()) continue;
    if (kind == "train") {
      p.series[0].x.push_back(r["step"].get<double>());
      p.series[0].y.push_back(r["loss"].get<double>());
    } else if (kind == "ppl") {
      p.series[1].x.push_back(r["step"].get<double>());
      p.series[1].y.push_back(r["loss"].get<double>());
    }
  }
  HYB_CHECK(!p.series[0].x.empty() || !p.series[1].x.empty(), path, ": no train or ppl records with a loss");
  write_file_atomic(out, render_svg(p));
  std::printf("wrote %s (%zu train, %zu val points)\n", out.c_str(), p.series[0].x.size(), p.series[1].x.size());
  return 0;
}

}  // namespace hyb
