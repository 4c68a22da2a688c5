// The shipped model configs: each resolves, and builds the model its spec describes (parameter counts
// from mamba2.md 2.1, gated_deltanet.md 2.1, config.md 10.1 to 10.4 and pha.md 10, 11).
#include <catch2/catch.hpp>

#include "config_test_util.h"
#include "core/safetensors.h"
#include "layers/model/causal_lm.h"
#include "train/model_from_config.h"

using namespace hyb;
using namespace hyb::config_test;

namespace {

struct Counts {
  int64_t total = 0, non_embedding = 0;
  std::vector<std::string> types;  // mixer type per layer
  std::vector<nlohmann::json> mixers;
};

// The config file as a GPU run would resolve it (bf16 needs a visible GPU; shards are not read),
// and its model built without values.
Counts build(const std::string& file, const std::vector<std::string>& sets = {}) {
  ResolveOptions o;
  o.check_files = false;
  o.cuda_devices = 1;
  const RunConfig rc = resolve(read_file(str_cat(HYBRID_SOURCE_DIR, "/", file)), sets, file, o);
  const LmConfig cfg = lm_config_from_run(rc);
  ParameterScope scope(Device::cpu());
  CausalLM lm(cfg);
  Counts c;
  c.total = lm.num_parameters();
  for (const auto& p : lm.named_parameters())
    if (p.name != "model.embeddings.weight" && p.name != "lm_head.weight") c.non_embedding += p.var.numel();
  for (const LayerSpec& l : cfg.layers) {
    c.types.push_back(l.mixer.at("type").get<std::string>());
    c.mixers.push_back(l.mixer);
  }
  return c;
}

// Per block of d = 1024 with a SwiGLU of 2816 and two RMSNorms.
constexpr int64_t kD = 1024, kMlp = 3 * kD * 2816, kNorms = 2 * kD;
// mamba2.md 2.1 with expand 2, headdim 64, d_state 128, G 1, W 4.
constexpr int64_t kDssm = 2048, kH = 32, kN = 128, kCc = kDssm + 2 * kN;
constexpr int64_t kMamba2 = kD * (2 * kDssm + 2 * kN + kH) + kCc * 5 + 3 * kH + kDssm + kDssm * kD;
// gated_deltanet.md 2.1 with H = HV = 6, K 128, V 256, W 4.
constexpr int64_t kKey = 6 * 128, kValue = 6 * 256;
constexpr int64_t kGdn = kD * (2 * kKey + 2 * kValue + 2 * 6) + kValue * kD + 4 * (2 * kKey + kValue) + 2 * 6 + 256;
constexpr int64_t kAttention = 4 * kD * kD;
// nha.md 7.1 with 16 heads of 64 and 64 slots: q, k, v, o, f_proj and the output norm gain.
constexpr int64_t kNha = 4 * kD * kD + kD * 16 * 64 + kD;

}  // namespace

TEST_CASE("gdn_h_340m is config.md 10.3's model: 352,893,436 non-embedding parameters, attention at 6, 14, 22",
          "[config][presets]") {
  const Counts c = build("configs/gdn_h_340m.json");
  REQUIRE(c.non_embedding == 352893436);
  for (size_t i = 0; i < c.types.size(); ++i) REQUIRE(c.types[i] == (i % 8 == 6 ? "attention" : "gated_deltanet"));
  REQUIRE(c.non_embedding == 21 * (kGdn + kMlp + kNorms) + 3 * (kAttention + kMlp + kNorms) + kD);
}

TEST_CASE("gdn_340m, mamba2_340m and mamba2_h_340m have the parameter counts of their layer specs", "[config][presets]") {
  REQUIRE(build("configs/gdn_340m.json").non_embedding == 24 * (kGdn + kMlp + kNorms) + kD);
  REQUIRE(build("configs/mamba2_340m.json").non_embedding == 24 * (kMamba2 + kMlp + kNorms) + kD);
  const Counts h = build("configs/mamba2_h_340m.json");
  REQUIRE(h.non_embedding == 21 * (kMamba2 + kMlp + kNorms) + 3 * (kAttention + kMlp + kNorms) + kD);
  for (size_t i = 0; i < h.types.size(); ++i) REQUIRE(h.types[i] == (i % 8 == 6 ? "attention" : "mamba2"));
}

TEST_CASE("the Mamba2 and GDN quickstart configs resolve to 4 layers of their family", "[config][presets]") {
  for (const char* file : {"configs/mamba2_quickstart.json", "configs/gdn_quickstart.json"}) {
    INFO(file);
    const Counts c = build(file);
    REQUIRE(c.types.size() == 4);
    REQUIRE(c.types[0] == (std::string(file).find("mamba2") != std::string::npos ? "mamba2" : "gated_deltanet"));
  }
}

TEST_CASE("nha_340m is config.md 10.2's model: 333,521,920 non-embedding parameters, full windows at 6, 14, 22",
          "[config][presets]") {
  const Counts c = build("configs/nha_340m.json");
  REQUIRE(c.non_embedding == 333521920);
  REQUIRE(c.non_embedding == 24 * (kNha + kMlp + kNorms) + kD);
  REQUIRE(c.types.size() == 24);
  for (size_t i = 0; i < c.types.size(); ++i) {
    REQUIRE(c.types[i] == "nha");
    REQUIRE(c.mixers[i].at("window") == (i % 8 == 6 ? -1 : 32));
    REQUIRE(c.mixers[i].at("slots") == 64);
  }
}

TEST_CASE("the quickstart is config.md 10.1's model: 1,083,008 non-embedding parameters, the last layer full",
          "[config][presets]") {
  const Counts c = build("configs/quickstart.json");
  REQUIRE(c.non_embedding == 1083008);
  REQUIRE(c.types.size() == 4);
  for (size_t i = 0; i < 4; ++i) REQUIRE(c.mixers[i].at("window") == (i == 3 ? -1 : 16));
}

TEST_CASE("the PHA configs have pha.md 10's parameter counts: 90M, 125M and 180M with the vocabulary padded to 50304",
          "[config][presets][pha]") {
  const Counts c90 = build("configs/pha_90m_wt103.json");
  REQUIRE(c90.total == 90036154);
  REQUIRE(c90.non_embedding == 65890234);
  const Counts c125 = build("configs/pha_125m_wt103.json");
  REQUIRE(c125.total == 125237348);
  REQUIRE(c125.non_embedding == 94652516);
  const Counts c180 = build("configs/pha_180m_wt103.json");
  REQUIRE(c180.total == 180419990);
  REQUIRE(c180.non_embedding == 141786518);
  for (const Counts* c : {&c90, &c125, &c180})
    for (const std::string& t : c->types) REQUIRE(t == "pha");
}

TEST_CASE("the PHA ablation variants of pha.md 11 have its parameter counts (V = 50257: the padded rows subtracted)",
          "[config][presets][pha]") {
  const int64_t pad = (50304 - 50257) * 768;
  REQUIRE(build("configs/pha_sequential_wt103.json").total - pad == 185719440);
  const std::pair<const char*, int64_t> rows[] = {
      {"[\"attn\"]", 98586744},        {"[\"attn\",\"gss\",\"ffn\"]", 180383894}, {"[\"attn\",\"ffn\"]", 120712844},
      {"[\"attn\",\"gss\"]", 158257804}, {"[\"gss\",\"ffn\"]", 164647444},         {"[\"gss\"]", 142521344},
  };
  for (const auto& [branches, want] : rows) {
    INFO(branches);
    REQUIRE(build("configs/pha_180m_wt103.json", {str_cat("model.block.mixer.branches=", branches)}).total - pad == want);
  }
}

TEST_CASE("the PHA quickstart resolves to 4 PHA blocks", "[config][presets][pha]") {
  const Counts c = build("configs/pha_quickstart.json");
  REQUIRE(c.types == std::vector<std::string>(4, "pha"));
}
