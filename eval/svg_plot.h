// SVG plots without a dependency (eval.md 8.3): line plots (loss curves, position curves) and heat
// maps (needle test, omega_L). Fixed geometry, Okabe-Ito colours, "nice" ticks, XML-escaped text,
// coordinates with two decimals: the same input gives a byte-identical file.
//   LinePlot p{"loss", "step", "loss"};  p.series.push_back({"train", xs, ys});  write_text(path, render_svg(p));
#pragma once
#include <string>
#include <vector>

namespace hyb {

struct Series {
  std::string name;
  std::vector<double> x, y;
  bool dashed = false;
};

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  int log_x = 0;  // 0: linear, 10 or 2: logarithmic x axis
};

struct HeatMap {
  std::string title, x_label, y_label;
  std::vector<std::string> x_ticks, y_ticks;  // one per column / row
  std::vector<std::vector<double>> values;    // [row][col]; NaN cells are drawn grey
  double lo = 0, hi = 1;
  std::string colormap = "viridis5";          // "viridis5" or "ryg"
  std::vector<std::vector<std::string>> cell_text;  // [row][col], printed in the cell; empty: none
  int64_t divider = -1;                       // a dashed vertical line left of this column; -1: none
};

std::string render_svg(const LinePlot& p);
std::string render_svg(const HeatMap& h);

// Tick positions covering [lo, hi] in steps of 1, 2 or 5 times a power of ten, 4 to 8 of them.
std::vector<double> nice_ticks(double lo, double hi);
// "#rrggbb" for t in [0, 1] on a named colour map.
std::string colormap_color(const std::string& name, double t);

}  // namespace hyb
