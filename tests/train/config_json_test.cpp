#include <catch2/catch.hpp>

#include "train/config/config_json.h"

using namespace hyb;

static std::string parse_error(const std::string& text) {
  try {
    parse_config_json(text, "configs/x.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("a duplicate key is an error naming its path, in objects and inside lists", "[config][json]") {
  REQUIRE(parse_error(R"({"model": {"d_model": 128, "d_model": 256}})") == "configs/x.json: model.d_model: duplicate key");
  REQUIRE(parse_error(R"({"model": {"overrides": [{"layers": "1"}, {"layers": "2", "mixer": {}, "layers": "3"}]}})") ==
          "configs/x.json: model.overrides[1].layers: duplicate key");
  REQUIRE(parse_error(R"({"a": [[1, 2], {"b": {"c": 1}, "d": [3]}, {"e": 1, "e": 2}]})") == "configs/x.json: a[2].e: duplicate key");
  REQUIRE(parse_error(R"({"train": 1, "train": 2})") == "configs/x.json: train: duplicate key");
}

TEST_CASE("equal keys in different objects are not duplicates and key order is kept", "[config][json]") {
  Json j = parse_config_json(R"({"z": {"x": 1}, "a": {"x": 2.5}, "m": [{"x": 3}, {"x": 4}]})", "x.json");
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  REQUIRE(keys == std::vector<std::string>{"z", "a", "m"});
  REQUIRE(j["a"]["x"].get<double>() == 2.5);
  REQUIRE(j["m"][1]["x"] == 4);
}

TEST_CASE("a syntax error reads FILE:LINE:COLUMN: invalid JSON: and the parser's message", "[config][json]") {
  // 8.2's example, a trailing comma: the closing brace on line 14, column 7.
  std::string text = "{\n";
  for (int i = 2; i <= 13; ++i) text += "  \"k" + std::to_string(i) + "\": " + std::to_string(i * 7) + ",\n";
  text += "      }\n";
  REQUIRE(parse_error(text) ==
          "configs/x.json:14:7: invalid JSON: syntax error while parsing object key - unexpected '}'; expected string literal");
  REQUIRE(parse_error("{\"a\": 1} // comment").rfind("configs/x.json:1:", 0) == 0);
  REQUIRE(parse_error("{\"a\": tru}").find("invalid JSON: syntax error while parsing value - invalid literal") != std::string::npos);
}
