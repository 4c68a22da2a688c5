#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "config_test_util.h"
#include "train/config/config_layers_view.h"
#include "train/config/config_params_view.h"
#include "train/config/config_schema.h"

using namespace hyb;
using namespace hyb::config_test;

static RunConfig resolve_show(const std::string& text) {
  ResolveOptions show;
  show.require_train = false;
  show.check_files = false;
  return resolve(text, {}, "configs/x.json", show);
}

TEST_CASE("config show --layers prints the layout and the keys that differ within each mixer type", "[config][show]") {
  RunConfig rc = resolve_show(R"({"model": {"d_model": 128,
      "blocks": {"G": {"mixer": {"type": "attention", "num_heads": 4, "window": 64}}, "A": {"mixer": {"type": "attention", "num_heads": 4}}},
      "layout": {"repeat": "GGGA", "n_layers": 8}, "overrides": [{"layers": "1", "mlp": {"intermediate_size": 100}}]},
    "data": {"train": "t.bin", "seq_len": 64}})");
  REQUIRE(layers_view(rc) ==
          "layout: GGGAGGGA\n"
          "0  attention  mlp 512\n"
          "1  attention  mlp 100  mlp.intermediate_size=100\n"
          "2  attention  mlp 512\n"
          "3  attention  mlp 512  window=0\n"
          "4  attention  mlp 512\n"
          "5  attention  mlp 512\n"
          "6  attention  mlp 512\n"
          "7  attention  mlp 512  window=0\n");
  RunConfig codes = resolve_show(R"({"model": {"d_model": 128,
      "blocks": {"gdn": {"mixer": {"type": "attention", "num_heads": 4}}, "natsl": {"mixer": {"type": "attention", "num_heads": 2}, "mlp": {"type": "none"}}},
      "layout": {"pattern": ["gdn", "natsl"]}}, "data": {"train": "t.bin", "seq_len": 64}})");
  REQUIRE(layers_view(codes) == "layout: gdn natsl\n0  attention  mlp 512\n1  attention  mlp none  num_heads=2  num_kv_heads=2  head_dim=64  "
                                "v_head_dim=64  softmax_scale=0.125  rope_dim=64  mlp.type=\"none\"  mlp.intermediate_size=null  "
                                "mlp.multiple_of=null\n");
}

TEST_CASE("a config without train resolves for config show and is required for training", "[config][show]") {
  const std::string text = R"({"model": {"d_model": 64, "num_layers": 1, "block": {"mixer": {"type": "attention", "num_heads": 2}}},
                               "data": {"train": "t.bin"}})";
  RunConfig rc = resolve_show(text);
  REQUIRE_FALSE(rc.resolved.contains("train"));
  REQUIRE(rc.name == "x");
  REQUIRE(error_no_files(text) == "configs/x.json: train: missing required key");
}

TEST_CASE("docs/configs.md holds the key reference generated from the key tables", "[config][docs]") {
  std::ifstream f(std::string(HYBRID_SOURCE_DIR) + "/docs/configs.md");
  REQUIRE(f);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- BEGIN GENERATED: hybrid config keys -->\n", end = "<!-- END GENERATED -->";
  const size_t a = doc.find(begin), b = doc.find(end);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  // Regenerate with: build/hybrid config keys
  REQUIRE(doc.substr(a + begin.size(), b - a - begin.size()) == config_reference_markdown());
}

TEST_CASE("the reference lists every key of every table with its default", "[config][docs]") {
  const std::string md = config_reference_markdown();
  for (const char* row : {"| `num_heads` | integer >= 1 | required |", "| `window` | integer >= 0 | `0` |",
                          "| `lr` | number > 0 | required |", "| `betas` | list of 2 numbers in [0, 1) | `[0.9,0.95]` |",
                          "| `final_ratio` | number in [0, 1] | `0.1` |", "| `recall-64` | 8192 |", "### `model.block.mixer.rope_scaling`",
                          "| `head_dim` | integer >= 1, or null | null: d_model / num_heads |"})
    REQUIRE_THAT(md, Catch::Contains(row));
}

TEST_CASE("config show --params lists every parameter with its decay and lr multiplier, then the totals", "[config][show]") {
  RunConfig rc = resolve_no_files(R"({"model": {"d_model": 128, "num_layers": 4,
      "block": {"mixer": {"type": "attention", "num_heads": 4, "window": 16}}},
    "data": {"train": "t.bin", "seq_len": 128},
    "train": {"batch_size": 16, "steps": 300, "optimizer": {"lr": 0.002, "weight_decay": 0.05,
              "param_groups": [{"params": "model.layers.3.*", "lr_mult": 0.5}]}}})");
  const std::string v = params_view(rc);
  // Per layer (attention.md 6, 7): q, k, v, o 128 x 128 each, SwiGLU 3 x 128 x 512, two norms of 128.
  const int64_t per_layer = 4 * 128 * 128 + 3 * 128 * 512 + 2 * 128;
  const int64_t non_embedding = 4 * per_layer + 128, embedding = 50304 * 128;
  REQUIRE_THAT(v, Catch::EndsWith(str_cat("parameters: ", embedding + non_embedding, "  non-embedding: ", non_embedding, "\n")));
  auto line_of = [&](const std::string& name) {
    const size_t a = v.find(name + " ");
    REQUIRE(a != std::string::npos);
    std::string line;  // runs of spaces (column padding) as one
    for (char c : v.substr(a, v.find('\n', a) - a))
      if (c != ' ' || line.empty() || line.back() != ' ') line += c;
    return line;
  };
  REQUIRE_THAT(line_of("model.embeddings.weight"), Catch::Contains("(50304, 128) 6438912 weight_decay=0.05 lr_mult=1.0"));
  REQUIRE_THAT(line_of("model.layers.0.mixer.q_proj.weight"), Catch::Contains("(128, 128) 16384 weight_decay=0.05 lr_mult=1.0"));
  REQUIRE_THAT(line_of("model.layers.3.mlp.down_proj.weight"), Catch::Contains("(128, 512) 65536 weight_decay=0.05 lr_mult=0.5"));
  REQUIRE_THAT(line_of("model.layers.3.mixer_norm.weight"), Catch::Contains("(128,) 128 weight_decay=0.0 lr_mult=0.5"));
  REQUIRE_THAT(line_of("model.norm.weight"), Catch::Contains("weight_decay=0.0 lr_mult=1.0"));
  RunConfig untied = resolve_no_files(rc.resolved.dump(), {"model.tie_embeddings=false"});
  REQUIRE_THAT(params_view(untied), Catch::EndsWith(str_cat("parameters: ", 2 * embedding + non_embedding, "  non-embedding: ", non_embedding, "\n")));
}
