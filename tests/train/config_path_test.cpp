#include <catch2/catch.hpp>

#include "train/config/config_path.h"

using namespace hyb;

static std::vector<int64_t> pick(const std::string& sel, int64_t n = 24) {
  return select_layers(Json(sel), n, "model.overrides[0].layers");
}

static std::string pick_error(const Json& sel, int64_t n = 24) {
  try {
    select_layers(sel, n, "model.overrides[0].layers");
  } catch (const ConfigKeyError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("selectors pick list elements with Python's meaning on a list of 24", "[config][path]") {
  REQUIRE(pick("6::8") == std::vector<int64_t>{6, 14, 22});
  REQUIRE(pick("-1") == std::vector<int64_t>{23});
  REQUIRE(pick("0:4,20:") == std::vector<int64_t>{0, 1, 2, 3, 20, 21, 22, 23});
  REQUIRE(pick("3,11") == std::vector<int64_t>{3, 11});
  REQUIRE(pick("*").size() == 24);
  REQUIRE(pick(":").size() == 24);
  REQUIRE(pick("-3:") == std::vector<int64_t>{21, 22, 23});
  REQUIRE(pick("-100:2") == std::vector<int64_t>{0, 1});     // slice bounds are clipped
  REQUIRE(pick("22:100") == std::vector<int64_t>{22, 23});
  REQUIRE(pick(":-21") == std::vector<int64_t>{0, 1, 2});
  REQUIRE(pick("1::10") == std::vector<int64_t>{1, 11, 21});
  REQUIRE(pick("-24") == std::vector<int64_t>{0});
  REQUIRE(select_layers(Json::array({3, 11, -2}), 24, "p") == std::vector<int64_t>{3, 11, 22});
}

TEST_CASE("a selector outside the list, empty, with a repeat, a zero step or bad syntax is an error", "[config][path]") {
  const std::string at = "model.overrides[0].layers: ";
  REQUIRE(pick_error(Json("24")) == at + "expected indices below 24 (the model has 24 layers), got \"24\"");
  REQUIRE(pick_error(Json("-25")) == at + "expected indices from -24 to 23 (the model has 24 layers), got \"-25\"");
  REQUIRE(pick_error(Json("3,3")) == at + "expected a selector that picks each layer once, got \"3,3\" (layer 3 twice)");
  REQUIRE(pick_error(Json("0:4,2")) == at + "expected a selector that picks each layer once, got \"0:4,2\" (layer 2 twice)");
  REQUIRE(pick_error(Json("30:40")) == at + "expected a selector that picks at least one layer (the model has 24 layers), got \"30:40\"");
  REQUIRE(pick_error(Json("6::0")) == at + "expected a slice step >= 1, got \"6::0\"");
  REQUIRE(pick_error(Json("6;8")) == at + "expected a layer selector such as \"6::8\", \"3,11\" or \"*\", got \"6;8\"");
  REQUIRE(pick_error(Json("6::-1")) == at + "expected a layer selector such as \"6::8\", \"3,11\" or \"*\", got \"6::-1\"");
  REQUIRE(pick_error(Json("")) == at + "expected a layer selector such as \"6::8\", \"3,11\" or \"*\", got \"\"");
  REQUIRE(pick_error(Json::array({3, 30})) == at + "expected indices below 24 (the model has 24 layers), got [3,30]");
  REQUIRE(pick_error(Json{{"a", 1}}) == at + "expected a layer selector such as \"6::8\", \"3,11\" or \"*\", got {\"a\":1}");
}

TEST_CASE("paths follow the grammar of config.md 4.1", "[config][path]") {
  auto p = parse_config_path("model.layers[0:4,20:].mixer.window");
  REQUIRE(p);
  REQUIRE(p->steps.size() == 5);
  REQUIRE(p->steps[2].is_key == false);
  REQUIRE(p->steps[2].selector.text == "0:4,20:");
  REQUIRE(p->starts_with("model", "layers"));
  REQUIRE_FALSE(parse_config_path("model.layers_x[0]")->starts_with("model", "layers"));
  REQUIRE_FALSE(parse_config_path("model.layout.pattern")->starts_with("model", "layers"));
  REQUIRE(parse_config_path("model.blocks.X.mixer.preset"));
  REQUIRE(parse_config_path("train.optimizer.betas[1]"));
  REQUIRE(parse_config_path("_a.b_2[*][0]"));
  for (const char* bad : {"", ".a", "a.", "a..b", "1a", "a.1b", "a[", "a[1", "a[1]b", "a[x]", "a b", "a.[1]"})
    REQUIRE_FALSE(parse_config_path(bad));
}

TEST_CASE("layer lists print as selectors with runs of three or more as a:b", "[config][path]") {
  std::vector<int64_t> all_but;
  for (int64_t i = 0; i < 24; ++i)
    if (i != 6 && i != 14 && i != 22) all_but.push_back(i);
  REQUIRE(format_layer_selector(all_but, 24) == "0:6,7:14,15:22,23");
  REQUIRE(format_layer_selector({3, 4}, 24) == "3,4");
  REQUIRE(format_layer_selector({3, 4, 5, 9}, 24) == "3:6,9");
  REQUIRE(format_layer_selector({0, 1, 2, 3}, 4) == "*");
  REQUIRE(format_layer_selector({7}, 24) == "7");
}
