// The omega_L probe (eval.md 6.1) on a small NHA model: limits (window 0 gives 1, a full window
// 0 < omega < 1), means consistent across the aggregates, the weighted-fusion coefficient, the
// record's fields and the heat map's shape.
#include <catch2/catch.hpp>

#include <filesystem>

#include "../data/data_test_util.h"
#include "autograd/gradcheck.h"
#include "data/shard.h"
#include "data/token_stream.h"
#include "eval/omega_probe.h"
#include "layers/nha/nha_config.h"
#include "layers/registry.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

json nha_mixer(const json& keys) {
  Json m = {{"type", "nha"}, {"num_heads", 2}, {"num_kv_heads", 2}, {"head_dim", 4}, {"value_head_dim", 4}, {"slots", 3}, {"window", 4}};
  for (const auto& [k, v] : keys.items()) m[k] = Json::parse(v.dump());
  LayerConfigContext ctx;
  ctx.d_model = 8;
  ctx.max_seq_len = 16;
  resolve_nha_config(m, ctx);
  return json::parse(m.dump());
}

}  // namespace

TEST_CASE("the omega_L probe averages each NHA layer's slot share by head and position", "[eval][probe][nha]") {
  const std::string dir = test::fresh_dir("omega_probe");
  write_shard(dir + "/s.bin", test::random_tokens(200, 13, 1));
  EvalWindows windows(TokenStream::open({dir + "/s.bin"}), 16, 16, 5);
  LmConfig cfg;
  cfg.vocab_size = 16;
  cfg.real_vocab = 13;
  cfg.d_model = 8;
  cfg.max_seq_len = 16;
  cfg.init_std = 0.3;
  cfg.layers = {{nha_mixer(json::object()), "swiglu", 12},
                {nha_mixer({{"window", 0}}), "swiglu", 12},
                {nha_mixer({{"window", -1}}), "none", 0},
                {nha_mixer({{"fusion", "weighted_fixed"}, {"fusion_weight", 0.25}}), "none", 0}};
  CausalLM lm(cfg);
  lm.initialize(3);
  const OmegaProbe p = probe_omega_l(lm, windows, 16, 2, Device::cpu(), DType::f32, 4);
  REQUIRE(p.tokens == 5 * 16);
  REQUIRE(p.layers.size() == 4);
  REQUIRE(p.layers[2].full_window);
  REQUIRE_FALSE(p.layers[0].full_window);
  REQUIRE(p.layers[3].definition == "fusion_coefficient");
  REQUIRE(p.by_layer[1] == Approx(1.0).epsilon(1e-6));
  REQUIRE(p.by_layer[3] == Approx(0.25).epsilon(1e-6));
  for (size_t l : {size_t(0), size_t(2)}) {
    REQUIRE(p.by_layer[l] > 0.0);
    REQUIRE(p.by_layer[l] < 1.0);
  }
  for (size_t l = 0; l < 4; ++l) {
    REQUIRE(p.by_layer_head[l].size() == 2);
    REQUIRE(p.by_layer_bucket[l].size() == 4);
    double heads = 0, buckets = 0;
    for (double x : p.by_layer_head[l]) heads += x / 2;
    for (double x : p.by_layer_bucket[l]) buckets += x / 4;  // equal buckets of 4 positions
    REQUIRE(heads == Approx(p.by_layer[l]).epsilon(1e-9));
    REQUIRE(buckets == Approx(p.by_layer[l]).epsilon(1e-9));
  }
  // The first positions of a windowed layer see empty slots (logit 0) and few window keys.
  REQUIRE(p.by_layer_bucket[2][0] > p.by_layer_bucket[2][3]);
  const HeatMap h = omega_heat_map(p);
  REQUIRE(h.values.size() == 4);
  REQUIRE(h.y_ticks[2] == "2 (full)");
  REQUIRE(h.x_ticks == std::vector<std::string>{"0", "4", "8", "12"});
  const std::string rec = omega_record(p, {"r", "sha", 1, 2}).line();
  for (const char* key : {"\"kind\":\"probe.omega_l\"", "\"by_layer_head\":[[", "\"by_layer_bucket\":[[", "\"bucket_width\":4",
                          "\"full_window\":true", "\"definition\":\"fusion_coefficient\""})
    REQUIRE(rec.find(key) != std::string::npos);
  // A model without NHA layers has nothing to probe.
  LmConfig plain = cfg;
  Json att = {{"type", "attention"}, {"num_heads", 2}, {"head_dim", 4}};
  LayerConfigContext actx;
  actx.d_model = 8;
  actx.max_seq_len = 16;
  find_layer("attention")->resolve_config(att, actx);
  plain.layers = {{json::parse(att.dump()), "none", 0}};
  REQUIRE_THROWS_WITH(probe_omega_l(*std::make_unique<CausalLM>(plain), windows, 16, 2, Device::cpu(), DType::f32, 4),
                      Catch::Contains("no nha layer"));
  std::filesystem::remove_all(dir);
}
