// layout.generate (intra_hybrid.md 2.1, 2.2): the placement rules against the spec's resolved
// examples and ablations.md 5.15's layouts, a generated model against the same model written as a
// pattern, and each error of the generator in the form of config.md 8.2.
#include <catch2/catch.hpp>

#include "config_test_util.h"
#include "train/config/config_layers_view.h"
#include "train/config/layout_generate.h"

using namespace hyb;
using namespace hyb::config_test;

namespace {

using Layers = std::vector<int64_t>;

std::string joined(const std::vector<std::string>& codes) {
  std::string s;
  for (const std::string& c : codes) s += c;
  return s;
}

// The pattern of a rule with T placed among M (S among T for every, as the SWA row writes it).
std::string pattern(const LayoutRule& r, const char* base = "M", const char* special = "T") {
  return joined(place_codes(r.n_layers, special_layers(r), base, special));
}

LayoutRule rule(const char* placement, int64_t n_layers, std::optional<int64_t> n_special) {
  return {.placement = placement, .n_layers = n_layers, .n_special = n_special};
}

std::string config(const std::string& generate, const std::string& extra = "") {
  return R"({"model": {"d_model": 64, )" + extra + R"("blocks": {"M": {"mixer": {"type": "attention", "num_heads": 2, "window": 8}},
      "T": {"mixer": {"type": "attention", "num_heads": 2}}}, "layout": {"generate": )" + generate + R"(}},
    "data": {"train": "t.bin", "seq_len": 64}, "train": {"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001}}})";
}

}  // namespace

TEST_CASE("the placement rules give every resolved example of intra_hybrid.md 2.2", "[config][layout]") {
  struct Row {
    const char* placement;
    int64_t L, n;
    const char* pattern;
    Layers layers;
  };
  const Row rows[] = {
      {"middle", 13, 2, "MMMTMMMMMTMMM", {3, 9}},
      {"middle", 13, 3, "MMTMMMTMMMTMM", {2, 6, 10}},
      {"middle", 14, 7, "MTMTMTMTMTMTMT", {1, 3, 5, 7, 9, 11, 13}},
      {"middle", 13, 1, "MMMMMMTMMMMMM", {6}},
      {"middle", 11, 2, "MMTMMMMMTMM", {2, 8}},
      {"middle", 11, 3, "MTMMMTMMMTM", {1, 5, 9}},
      {"middle", 12, 6, "MTMTMTMTMTMT", {1, 3, 5, 7, 9, 11}},
      {"middle", 11, 1, "MMMMMTMMMMM", {5}},
      {"front", 13, 2, "TMMMMMMMMTMMM", {0, 9}},
      {"end", 13, 2, "MMMTMMMMMMMMT", {3, 12}},
      {"front", 13, 3, "TMMMMMTMMMTMM", {0, 6, 10}},
      {"end", 13, 3, "MMTMMMTMMMMMT", {2, 6, 12}},
  };
  for (const Row& row : rows) {
    INFO(row.placement << " L " << row.L << " n " << row.n);
    REQUIRE(special_layers(rule(row.placement, row.L, row.n)) == row.layers);
    REQUIRE(pattern(rule(row.placement, row.L, row.n)) == row.pattern);
    if (std::string(row.placement) == "middle") REQUIRE(special_layers(rule("scatter", row.L, row.n)) == row.layers);
  }
  // SWA 1B: every(6) of 16, n derived or given as 3.
  for (std::optional<int64_t> n : {std::optional<int64_t>(), std::optional<int64_t>(3)}) {
    const LayoutRule swa{.placement = "every", .n_layers = 16, .n_special = n, .period = 6};
    REQUIRE(special_layers(swa) == Layers{5, 11, 15});
    REQUIRE(pattern(swa, "S", "T") == "SSSSSTSSSSSTSSST");
  }
}

TEST_CASE("cluster, scatter and sandwich give the layouts of ablations.md 5.15, and position(q) puts one block at q", "[config][layout]") {
  REQUIRE(special_layers(rule("cluster", 13, 3)) == Layers{5, 6, 7});
  REQUIRE(special_layers(rule("middle", 13, 3)) == Layers{2, 6, 10});
  REQUIRE(special_layers(rule("sandwich", 13, 3)) == Layers{0, 6, 12});
  REQUIRE(special_layers(rule("middle", 13, 6)) == Layers{1, 3, 5, 7, 9, 11});
  REQUIRE(special_layers(rule("middle", 13, 1)) == Layers{6});
  REQUIRE(pattern(rule("cluster", 13, 3), "M", "X") == "MMMMMXXXMMMMM");
  REQUIRE(pattern(rule("sandwich", 13, 3), "M", "X") == "XMMMMMXMMMMMX");
  for (int64_t q = 0; q < 13; ++q) {
    LayoutRule r = rule("position", 13, 1);
    r.position = q;
    REQUIRE(special_layers(r) == Layers{q});
  }
  REQUIRE(special_layers(rule("sandwich", 13, 2)) == Layers{0, 12});
  REQUIRE(special_layers(rule("sandwich", 13, 5)) == Layers{0, 2, 6, 10, 12});
  REQUIRE(special_layers({.placement = "every", .n_layers = 4, .period = 8}) == Layers{3});
  REQUIRE(special_layers({.placement = "every", .n_layers = 24, .period = 8}) == Layers{7, 15, 23});
}

TEST_CASE("every rule gives n distinct layers for every n <= L, and middle avoids layer 0 for n <= L/2", "[config][layout]") {
  for (int64_t L = 1; L <= 40; ++L)
    for (int64_t n = 1; n <= L; ++n)
      for (const char* placement : {"middle", "front", "end", "cluster", "sandwich"}) {
        if (std::string(placement) == "sandwich" && n < 2) continue;
        INFO(placement << " L " << L << " n " << n);
        const Layers p = special_layers(rule(placement, L, n));
        REQUIRE(int64_t(p.size()) == n);
        REQUIRE(std::is_sorted(p.begin(), p.end()));
        REQUIRE_NOTHROW(place_codes(L, p, "M", "T"));
        if (std::string(placement) == "middle" && 2 * n <= L) REQUIRE(p.front() > 0);
        if (std::string(placement) == "middle" && n == 1) REQUIRE(p.front() == L / 2);
      }
}

TEST_CASE("placing codes refuses a repeated or out-of-range layer index", "[config][layout][errors]") {
  auto problem = [](int64_t L, const Layers& layers) -> std::string {
    try {
      place_codes(L, layers, "M", "T");
    } catch (const ConfigKeyError& e) {
      return e.path() + ": " + e.problem();
    }
    return "";
  };
  REQUIRE(problem(4, {1, 1}) == "placement: expected distinct layer indices below n_layers (4), got [1,1]");
  REQUIRE(problem(4, {4}) == "placement: expected distinct layer indices below n_layers (4), got [4]");
  REQUIRE(problem(4, {-1}) == "placement: expected distinct layer indices below n_layers (4), got [-1]");
}

TEST_CASE("a generated layout resolves to the model its pattern writes", "[config][layout][resolve]") {
  const std::string blocks = R"({"model": {"d_model": 128, "norm_eps": 1e-5, "init": "gpt2",
      "block": {"mlp": {"type": "swiglu", "intermediate_size": 256}},
      "blocks": {"T": {"mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2}},
                 "M": {"mixer": {"type": "mamba2", "headdim": 32, "d_state": 32}}}, "layout": )";
  const std::string rest = R"(}, "data": {"train": "t.bin", "seq_len": 64}, "train": {"batch_size": 8, "steps": 10, "optimizer": {"lr": 0.001}}})";
  RunConfig generated = resolve_no_files(
      blocks + R"({"generate": {"n_layers": 13, "base": "M", "special": "T", "n_special": 2, "placement": "middle"}})" + rest);
  RunConfig written = resolve_no_files(blocks + R"({"pattern": "MMMTMMMMMTMMM"})" + rest);
  REQUIRE(joined(generated.layout_codes) == "MMMTMMMMMTMMM");
  REQUIRE(generated.model.num_layers() == 13);
  const Json& layers = generated.resolved["model"]["layers"];
  REQUIRE(layers.size() == 13);
  for (size_t i = 0; i < layers.size(); ++i) REQUIRE(layers[i]["mixer"]["type"] == (i == 3 || i == 9 ? "attention" : "mamba2"));
  REQUIRE(generated.resolved["model"]["num_layers"] == 13);
  REQUIRE_FALSE(generated.resolved["model"].contains("layout"));
  REQUIRE(generated.resolved.dump() == written.resolved.dump());
  REQUIRE(generated.sha256 == written.sha256);
  std::string view = "layout: MMMTMMMMMTMMM\n";
  for (int i = 0; i < 13; ++i) view += str_cat(i < 10 ? " " : "", i, i == 3 || i == 9 ? "  attention" : "  mamba2   ", "  mlp 256\n");
  REQUIRE(layers_view(generated) == view);
  // num_layers may be given when it agrees.
  REQUIRE(resolve_no_files(config(R"({"n_layers": 4, "base": "M", "special": "T", "n_special": 1, "placement": "end"})",
                                  R"("num_layers": 4, )")).layout_codes == std::vector<std::string>{"M", "M", "M", "T"});
}

TEST_CASE("each error of the generator names its key, the value and what was expected", "[config][layout][errors]") {
  auto gen = [](const std::string& keys) { return error_no_files(config(R"({"n_layers": 4, "base": "M", "special": "T", )" + keys + "}")); };
  REQUIRE(gen(R"("n_special": 5, "placement": "middle")") ==
          "configs/x.json: model.layout.generate.n_special: expected at most n_layers (4), got 5");
  REQUIRE(gen(R"("n_special": 0, "placement": "middle")") == "configs/x.json: model.layout.generate.n_special: expected an integer >= 1, got 0");
  REQUIRE(gen(R"("placement": "middle")") ==
          "configs/x.json: model.layout.generate.n_special: missing required key (placement \"middle\" needs it; only \"every\" derives it)");
  REQUIRE(gen(R"("n_special": 1, "placement": "sandwich")") ==
          "configs/x.json: model.layout.generate.n_special: expected at least 2 with placement \"sandwich\", got 1");
  REQUIRE(gen(R"("n_special": 1, "placement": "position", "position": 4)") ==
          "configs/x.json: model.layout.generate.position: expected a layer index below n_layers (4), got 4");
  REQUIRE(gen(R"("n_special": 1, "placement": "position", "position": -1)") ==
          "configs/x.json: model.layout.generate.position: expected an integer >= 0, got -1");
  REQUIRE(gen(R"("n_special": 2, "placement": "position", "position": 1)") ==
          "configs/x.json: model.layout.generate.n_special: expected 1 with placement \"position\", got 2");
  REQUIRE(gen(R"("n_special": 1, "placement": "position")") == "configs/x.json: model.layout.generate.position: missing required key");
  REQUIRE(gen(R"("placement": "every")") == "configs/x.json: model.layout.generate.period: missing required key");
  REQUIRE(gen(R"("n_special": 1, "placement": "every", "period": 2)") ==
          "configs/x.json: model.layout.generate.n_special: expected 2 (the layers period 2 picks among 4), got 1");
  REQUIRE(gen(R"("placement": "every", "period": 0)") == "configs/x.json: model.layout.generate.period: expected an integer >= 1, got 0");
  REQUIRE(gen(R"("n_special": 1, "placement": "middle", "period": 2)") ==
          "configs/x.json: model.layout.generate.period: cannot be used here: generator placement is \"middle\"");
  REQUIRE(gen(R"("n_special": 1, "placement": "every", "position": 2, "period": 2)") ==
          "configs/x.json: model.layout.generate.position: cannot be used here: generator placement is \"every\"");
  REQUIRE(gen(R"("n_special": 1, "placement": "centre")") ==
          "configs/x.json: model.layout.generate.placement: expected one of \"middle\", \"scatter\", \"front\", \"end\", \"position\", "
          "\"cluster\", \"sandwich\", \"every\", got \"centre\"");
  REQUIRE(gen(R"("n_special": 1)") == "configs/x.json: model.layout.generate.placement: missing required key");
  REQUIRE(gen(R"("n_specials": 1, "placement": "middle")") ==
          "configs/x.json: model.layout.generate.n_specials: unknown key (did you mean \"model.layout.generate.n_special\"?)");
  REQUIRE(error_no_files(config(R"({"n_layers": 4, "base": "X", "special": "T", "n_special": 1, "placement": "middle"})")) ==
          "configs/x.json: model.layout.generate.base: expected a code defined in model.blocks (\"M\", \"T\"), got \"X\"");
  REQUIRE(error_no_files(config(R"({"n_layers": 4, "base": "M", "special": "TT", "n_special": 1, "placement": "middle"})")) ==
          "configs/x.json: model.layout.generate.special: expected a code defined in model.blocks (\"M\", \"T\"), got \"TT\"");
  REQUIRE(error_no_files(config(R"({"n_layers": 4, "base": 1, "special": "T", "n_special": 1, "placement": "middle"})")) ==
          "configs/x.json: model.layout.generate.base: expected a block code, got 1");
  REQUIRE(error_no_files(config(R"({"base": "M", "special": "T", "n_special": 1, "placement": "middle"})")) ==
          "configs/x.json: model.layout.generate.n_layers: missing required key");
  REQUIRE(error_no_files(config(R"({"n_layers": 4, "base": "M", "special": "T", "n_special": 1, "placement": "middle"})", R"("num_layers": 5, )")) ==
          "configs/x.json: model.num_layers: expected 4 (the number of layers of model.layout), got 5");
  REQUIRE(error_no_files(config(R"([4])")) == "configs/x.json: model.layout.generate: expected an object, got [4]");
  REQUIRE(error_no_files(config(R"({"n_layers": 4, "base": "M", "special": "T", "n_special": 1, "placement": "middle"}, "n_layers": 4)")) ==
          "configs/x.json: model.layout.n_layers: cannot be used here: n_layers goes with repeat");
  REQUIRE(error_no_files(config(R"({"n_layers": 4, "base": "M", "special": "T", "n_special": 1, "placement": "middle"}, "pattern": "MT")")) ==
          "configs/x.json: model.layout.generate: cannot be used here: model.layout has pattern");
  // A --set into the generator is named as such.
  REQUIRE(error_no_files(config(R"({"n_layers": 4, "base": "M", "special": "T", "n_special": 1, "placement": "middle"})"),
                         {"model.layout.generate.n_special=9"}) ==
          "--set: model.layout.generate.n_special: expected at most n_layers (4), got 9");
}
