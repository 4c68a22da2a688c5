#include "eval/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace hyb {
namespace {

constexpr double kWidth = 720, kHeight = 440, kLeft = 64, kRight = 16, kTop = 28, kBottom = 48;
const char* const kPalette[] = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", std::abs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string header(double w, double h) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(w) + "\" height=\"" + num(h) + "\" viewBox=\"0 0 " +
         num(w) + " " + num(h) + "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
}

std::string text(double x, double y, const std::string& s, const char* anchor, int size = 12, const char* extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\" font-size=\"" +
         std::to_string(size) + "\"" + extra + ">" + escape(s) + "</text>\n";
}

int hex_digit(char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

int hex_byte(const char* p) { return hex_digit(p[0]) * 16 + hex_digit(p[1]); }

// Whether "#rrggbb" is dark enough that text on it should be white (luma below 0.45).
bool dark(const std::string& color) {
  const double luma = 0.299 * hex_byte(&color[1]) + 0.587 * hex_byte(&color[3]) + 0.114 * hex_byte(&color[5]);
  return luma < 0.45 * 255;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi) {
  if (!(hi > lo)) {
    const double pad = std::abs(lo) > 0 ? std::abs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  const double span = hi - lo;
  std::vector<double> best;
  for (double mag = std::pow(10.0, std::floor(std::log10(span)) - 2); mag <= span * 10; mag *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double step = m * mag;
      const double first = std::ceil(lo / step - 1e-9) * step;
      std::vector<double> t;
      for (double v = first; v <= hi + step * 1e-9; v += step) t.push_back(v);
      if (t.size() >= 4 && t.size() <= 8) return t;
      if (t.size() >= 2 && t.size() < 4 && best.empty()) best = t;
    }
  }
  return best.empty() ? std::vector<double>{lo, hi} : best;
}

std::string colormap_color(const std::string& name, double t) {
  std::vector<std::pair<double, const char*>> stops;
  if (name == "ryg") {
    stops = {{0.0, "#d73027"}, {0.5, "#fee08b"}, {1.0, "#1a9850"}};
  } else {
    HYB_CHECK(name == "viridis5", "colormap: unknown map \"", name, "\" (ryg, viridis5)");
    stops = {{0.0, "#440154"}, {0.25, "#3b528b"}, {0.5, "#21918c"}, {0.75, "#5ec962"}, {1.0, "#fde725"}};
  }
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0);
  size_t i = 0;
  while (i + 2 < stops.size() && t > stops[i + 1].first) ++i;
  const double f = (t - stops[i].first) / (stops[i + 1].first - stops[i].first);
  char out[8];
  int rgb[3];
  for (int c = 0; c < 3; ++c) {
    const char* a = stops[i].second + 1 + 2 * c;
    const char* b = stops[i + 1].second + 1 + 2 * c;
    const double va = hex_byte(a), vb = hex_byte(b);
    rgb[c] = int(std::lround(va + (vb - va) * f));
  }
  std::snprintf(out, sizeof(out), "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return out;
}

std::string render_svg(const LinePlot& p) {
  auto tx = [&](double x) { return p.log_x ? std::log(x) / std::log(double(p.log_x)) : x; };
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series& s : p.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i]) || (p.log_x && s.x[i] <= 0)) continue;
      x0 = std::min(x0, tx(s.x[i]));
      x1 = std::max(x1, tx(s.x[i]));
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  std::vector<double> xt = nice_ticks(x0, x1), yt = nice_ticks(y0, y1);
  x0 = std::min(x0, xt.front());
  x1 = std::max(x1, xt.back());
  y0 = std::min(y0, yt.front());
  y1 = std::max(y1, yt.back());
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };

  std::string s = header(kWidth, kHeight);
  s += text(kWidth / 2, 18, p.title, "middle", 14);
  s += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
       "\" fill=\"none\" stroke=\"#000000\"/>\n";
  for (double v : xt) {
    s += "<line x1=\"" + num(px(v)) + "\" y1=\"" + num(kTop + ph) + "\" x2=\"" + num(px(v)) + "\" y2=\"" +
         num(kTop + ph + 4) + "\" stroke=\"#000000\"/>\n";
    s += text(px(v), kTop + ph + 18, tick_label(p.log_x ? std::pow(double(p.log_x), v) : v), "middle");
  }
  for (double v : yt) {
    s += "<line x1=\"" + num(kLeft - 4) + "\" y1=\"" + num(py(v)) + "\" x2=\"" + num(kLeft) + "\" y2=\"" + num(py(v)) +
         "\" stroke=\"#000000\"/>\n";
    s += text(kLeft - 6, py(v) + 4, tick_label(v), "end");
  }
  s += text(kLeft + pw / 2, kHeight - 10, p.x_label, "middle");
  s += text(14, kTop + ph / 2, p.y_label, "middle", 12,
            (" transform=\"rotate(-90 14 " + num(kTop + ph / 2) + ")\"").c_str());
  for (size_t k = 0; k < p.series.size(); ++k) {
    const Series& ser = p.series[k];
    std::string pts;
    for (size_t i = 0; i < ser.x.size(); ++i) {
      if (!std::isfinite(ser.y[i]) || (p.log_x && ser.x[i] <= 0)) continue;
      pts += (pts.empty() ? "" : " ") + num(px(tx(ser.x[i]))) + "," + num(py(ser.y[i]));
    }
    s += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + kPalette[k % 8] + "\" stroke-width=\"1.5\"" +
         (ser.dashed ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
  }
  if (!p.series.empty()) {
    const double lw = 150, lh = 8 + 16 * double(p.series.size());
    const double lx = kLeft + pw - lw - 8, ly = kTop + 8;
    s += "<rect x=\"" + num(lx) + "\" y=\"" + num(ly) + "\" width=\"" + num(lw) + "\" height=\"" + num(lh) +
         "\" fill=\"#ffffff\" stroke=\"#000000\"/>\n";
    for (size_t k = 0; k < p.series.size(); ++k) {
      const double yy = ly + 14 + 16 * double(k);
      s += "<line x1=\"" + num(lx + 6) + "\" y1=\"" + num(yy - 4) + "\" x2=\"" + num(lx + 28) + "\" y2=\"" + num(yy - 4) +
           "\" stroke=\"" + kPalette[k % 8] + "\" stroke-width=\"1.5\"/>\n";
      s += text(lx + 34, yy, p.series[k].name, "start");
    }
  }
  return s + "</svg>\n";
}

std::string render_svg(const HeatMap& h) {
  const size_t rows = h.values.size(), cols = rows ? h.values[0].size() : 0;
  for (const auto& r : h.values) HYB_CHECK(r.size() == cols, "heat map: rows of unequal length");
  const double cell = std::min(40.0, (1600.0 - 120.0 - 60.0) / std::max<size_t>(cols, 1));
  const double width = 120 + 60 + cell * double(cols), height = kTop + kBottom + 40.0 * double(rows);
  const double ch = 40.0, left = 100;
  std::string s = header(width, height);
  s += text(width / 2, 18, h.title, "middle", 14);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const double v = h.values[r][c];
      const std::string col = std::isfinite(v) ? colormap_color(h.colormap, (v - h.lo) / (h.hi - h.lo)) : "#bbbbbb";
      s += "<rect x=\"" + num(left + cell * double(c)) + "\" y=\"" + num(kTop + ch * double(r)) + "\" width=\"" + num(cell) +
           "\" height=\"" + num(ch) + "\" fill=\"" + col + "\"/>\n";
      if (r < h.cell_text.size() && c < h.cell_text[r].size() && !h.cell_text[r][c].empty())
        s += text(left + cell * (double(c) + 0.5), kTop + ch * (double(r) + 0.5) + 4, h.cell_text[r][c], "middle", 12,
                  dark(col) ? " fill=\"#ffffff\"" : "");
    }
    if (r < h.y_ticks.size()) s += text(left - 6, kTop + ch * (double(r) + 0.5) + 4, h.y_ticks[r], "end");
  }
  if (h.divider >= 0) {
    const double x = left + cell * double(h.divider);
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(kTop - 4) + "\" x2=\"" + num(x) + "\" y2=\"" +
         num(kTop + ch * double(rows) + 4) + "\" stroke=\"#000000\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n";
  }
  const size_t every = std::max<size_t>(1, cols / 16);
  for (size_t c = 0; c < cols && c < h.x_ticks.size(); c += every)
    s += text(left + cell * (double(c) + 0.5), kTop + ch * double(rows) + 16, h.x_ticks[c], "middle");
  s += text(left + cell * double(cols) / 2, height - 10, h.x_label, "middle");
  s += text(14, kTop + ch * double(rows) / 2, h.y_label, "middle", 12,
            (" transform=\"rotate(-90 14 " + num(kTop + ch * double(rows) / 2) + ")\"").c_str());
  const double bx = left + cell * double(cols) + 16, bh = ch * double(rows);
  for (int i = 0; i < 20; ++i) {
    const double t = 1 - (i + 0.5) / 20;
    s += "<rect x=\"" + num(bx) + "\" y=\"" + num(kTop + bh * i / 20) + "\" width=\"12\" height=\"" + num(bh / 20 + 0.5) +
         "\" fill=\"" + colormap_color(h.colormap, t) + "\"/>\n";
  }
  s += text(bx + 16, kTop + 10, tick_label(h.hi), "start");
  s += text(bx + 16, kTop + bh, tick_label(h.lo), "start");
  return s + "</svg>\n";
}

}  // namespace hyb
