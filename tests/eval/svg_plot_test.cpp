#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include "eval/records.h"
#include "eval/svg_plot.h"

using namespace hyb;

static std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Regenerate a golden after an intended change: HYBRID_UPDATE_GOLDEN=1 ./test_eval, then look at it.
static void check_golden(const std::string& name, const std::string& svg) {
  const std::string path = std::string(HYBRID_SOURCE_DIR) + "/tests/eval/golden/" + name;
  if (std::getenv("HYBRID_UPDATE_GOLDEN")) {
    std::ofstream(path, std::ios::binary) << svg;
  }
  REQUIRE(read_file(path) == svg);
}

TEST_CASE("nice ticks use steps of 1, 2 or 5 times a power of ten, 4 to 8 of them", "[eval][svg]") {
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{{0, 1}, {3.2, 4.9}, {0, 3000}, {-0.013, 0.041}, {1, 1}}) {
    auto t = nice_ticks(lo, hi);
    REQUIRE(t.size() >= 2);
    REQUIRE(t.size() <= 8);
    const double step = t[1] - t[0];
    const double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    REQUIRE((std::abs(m - 1) < 1e-6 || std::abs(m - 2) < 1e-6 || std::abs(m - 5) < 1e-6));
  }
}

TEST_CASE("colour maps interpolate between their stops", "[eval][svg]") {
  REQUIRE(colormap_color("ryg", 0) == "#d73027");
  REQUIRE(colormap_color("ryg", 1) == "#1a9850");
  REQUIRE(colormap_color("viridis5", 0.5) == "#21918c");
  REQUIRE(colormap_color("viridis5", 0.125) == "#402a70");
}

TEST_CASE("a line plot is byte-identical to its golden", "[eval][svg]") {
  LinePlot p{"loss <&>", "step", "loss", {{"train", {0, 10, 20, 30}, {10.8, 7.1, 6.2, 5.9}}, {"val", {15, 30}, {6.9, 6.1}, true}}};
  check_golden("line_plot.svg", render_svg(p));
}

TEST_CASE("a heat map is byte-identical to its golden", "[eval][svg]") {
  HeatMap h{"omega_L", "position", "layer", {"0", "1", "2"}, {"L0", "L1"}, {{0.1, 0.5, 0.9}, {NAN, 0.25, 1.0}}, 0, 1, "viridis5"};
  check_golden("heat_map.svg", render_svg(h));
}

TEST_CASE("a heat map with text in its cells and a dashed divider is byte-identical to its golden", "[eval][svg]") {
  HeatMap h{"needle", "length", "depth", {"64", "128", "256"}, {"0%", "100%"}, {{1.0, 0.5, 0.0}, {0.25, NAN, 0.75}}, 0, 1, "ryg",
            {{"100%", "50%", "0%"}, {"25%", "", "75%"}}, 2};
  check_golden("heat_map_labelled.svg", render_svg(h));
}

TEST_CASE("records carry the envelope, %.9g floats and null for non-finite values", "[eval][records]") {
  Record r("ppl", {"run1", "ab12", 500, 7});
  r.add("loss", 3.14159265358979).add("ppl", std::numeric_limits<double>::infinity()).add("windows", int64_t(64));
  std::string l = r.line();
  REQUIRE(l.find("{\"v\":1,\"kind\":\"ppl\",\"time\":\"") == 0);
  REQUIRE(l.find("\"run\":\"run1\",\"config_sha256\":\"ab12\",\"step\":500,\"seed\":7,\"loss\":3.14159265,\"ppl\":null,\"windows\":64,\"nonfinite\":[\"ppl\"]}") !=
          std::string::npos);
}
