// The pha mixer object (pha.md 10): defaults and DeepNet's alpha and beta (7.1, Choice 13), branch
// order, the nested attention and aux-FFN objects resolved by their families, every validation rule,
// and a resolved object resolving to itself.
#include <catch2/catch.hpp>
#include <cmath>

#include "layers/pha/pha_cases.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

std::string error_of(const json& written, int64_t num_layers = 2) {
  return config_error([&] { pha_resolved(written, 8, num_layers); });
}

}  // namespace

TEST_CASE("pha resolves to pha.md 10's defaults, with alpha = (2L)^(1/4) and beta = (8L)^(-1/4) (7.1's table)",
          "[pha][config]") {
  for (const auto& [L, alpha, beta] : {std::tuple{10, 2.1147, 0.3344}, {12, 2.2134, 0.3195}, {14, 2.3003, 0.3074}}) {
    const json m = pha_resolved(pha_small_written(), 8, L);
    REQUIRE(m["composition"] == "parallel");
    REQUIRE(m["branches"] == json::array({"attn", "gss", "ffn"}));
    REQUIRE(m["residual"]["kind"] == "deepnorm");
    REQUIRE(m["residual"]["source"] == "normed");
    REQUIRE(m["residual"]["alpha"].get<double>() == Approx(alpha).epsilon(1e-4));
    REQUIRE(m["residual"]["beta"].get<double>() == Approx(beta).epsilon(1e-3));
    REQUIRE(m["residual"]["beta_targets"] == json::array({"model.layers.*.mlp.*"}));
    REQUIRE(m["mix"]["init"] == 0.0);
    REQUIRE(m["gss"] == json{{"expand", 2}, {"dss_dim", 4}, {"dss_state", 3}, {"lambda_imag", "exp"}, {"init", "random"},
                             {"layernorm_eps", 1e-5}});
    REQUIRE(m["attn"]["logits"] == "cosine");
    REQUIRE(m["attn"]["max_position"] == 64);
    REQUIRE(m["aux_mlp"]["intermediate_size"] == 12);
    REQUIRE(m["init"] == "xavier_normal");
    REQUIRE(pha_resolved(m, 8, L) == m);
  }
}

TEST_CASE("pha sequential counts three residual sublayers a block: alpha 36^(1/4), beta 144^(-1/4) at L = 12 (11.1)",
          "[pha][config]") {
  json w = pha_small_written({{"composition", "sequential"}});
  w.erase("aux_mlp");
  const json m = pha_resolved(w, 8, 12);
  REQUIRE(m["residual"]["alpha"].get<double>() == Approx(2.449).epsilon(1e-3));
  REQUIRE(m["residual"]["beta"].get<double>() == Approx(0.2887).epsilon(1e-3));
  REQUIRE(m["residual"]["beta_targets"].size() == 6);
  REQUIRE(!m.contains("branches"));
  REQUIRE(!m.contains("mix"));
  REQUIRE(pha_resolved(m, 8, 12) == m);
  REQUIRE(error_of(pha_small_written({{"composition", "sequential"}})) ==
          "aux_mlp: cannot be used here: pha composition is \"sequential\"");
}

TEST_CASE("pha stores branches in the order attn, gss, ffn; plain residuals are alpha = beta = 1 with raw sources",
          "[pha][config]") {
  REQUIRE(pha_resolved(pha_small_written({{"branches", {"ffn", "attn"}}}))["branches"] == json::array({"attn", "ffn"}));
  const json plain = pha_resolved(pha_small_written({{"residual", {{"kind", "plain"}}}}));
  REQUIRE(plain["residual"]["source"] == "raw");
  REQUIRE(plain["residual"]["alpha"] == 1.0);
  REQUIRE(plain["residual"]["beta"] == 1.0);
  // A branch that is not kept needs no object.
  json no_attn = pha_small_written({{"branches", {"gss"}}});
  no_attn.erase("attn");
  REQUIRE(pha_resolved(no_attn)["attn"].is_null());
}

TEST_CASE("pha refuses what pha.md 10 and config.md 3.4 rule out, naming the key", "[pha][config]") {
  const std::string branches = "branches: expected a non-empty list of distinct \"attn\", \"gss\", \"ffn\", got ";
  REQUIRE(error_of(pha_small_written({{"branches", json::array()}})) == branches + "[]");
  REQUIRE(error_of(pha_small_written({{"branches", {"attn", "attn"}}})) == branches + "[\"attn\",\"attn\"]");
  REQUIRE(error_of(pha_small_written({{"branches", {"mamba"}}})) == branches + "[\"mamba\"]");
  REQUIRE(error_of(pha_small_written({{"gss", {{"init", "s4d_lin"}}}})) ==
          "gss.init: expected \"random\" with lambda_imag \"exp\" (s4d_lin needs \"linear\"), got \"s4d_lin\"");
  REQUIRE(error_of(pha_small_written({{"gss", {{"dss_state", 0}}}})) == "gss.dss_state: expected an integer >= 1, got 0");
  REQUIRE(error_of(pha_small_written({{"residual", {{"kind", "plain"}, {"source", "normed"}}}})) ==
          "residual.source: expected \"raw\" or null with kind \"plain\", got \"normed\" (a post-norm network without "
          "alpha is not a PHA variant)");
  REQUIRE(error_of(pha_small_written({{"residual", {{"kind", "plain"}, {"alpha", 2.0}}}})) ==
          "residual.alpha: expected 1 or null with kind \"plain\", got 2.0");
  REQUIRE(error_of(pha_small_written({{"dropout", 1.0}})) == "dropout: expected a number in [0, 1), got 1.0");
  json no_attn = pha_small_written();
  no_attn.erase("attn");
  REQUIRE(error_of(no_attn).starts_with("attn: missing"));
  REQUIRE(error_of(pha_small_written({{"attn", {{"num_heads", 3}, {"num_kv_heads", 2}}}})) ==
          "attn.num_kv_heads: expected a divisor of num_heads (3), got 2");
  REQUIRE(error_of(pha_small_written({{"aux_mlp", {{"type", "none"}, {"intermediate_size", nullptr}}}})) ==
          "aux_mlp.type: expected \"swiglu\" while the ffn branch is kept, got \"none\"");
  REQUIRE(error_of(pha_small_written({{"residual", {{"beta_targets", {"model.layers.*.mlp/*"}}}}})) ==
          "residual.beta_targets[0]: expected a glob of parameter names (letters, digits, _, ., * and ?), got "
          "\"model.layers.*.mlp/*\"");
  REQUIRE(error_of(pha_small_written({{"gss", {{"expnd", 4}}}})).starts_with("gss.expnd: unknown key"));
}
