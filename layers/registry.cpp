#include "layers/registry.h"

#include <algorithm>

#include "layers/gated_deltanet/gated_deltanet.h"
#include "layers/gated_deltanet/gated_deltanet_config.h"
#include "layers/gsa/gsa.h"
#include "layers/gsa/gsa_config.h"
#include "layers/head_split/head_split.h"
#include "layers/head_split/head_split_config.h"
#include "layers/mamba2/mamba2.h"
#include "layers/mamba2/mamba2_config.h"
#include "layers/nha/nha.h"
#include "layers/nha/nha_config.h"
#include "layers/pha/pha.h"
#include "layers/pha/pha_config.h"
#include "layers/softmax_attention/attention.h"
#include "layers/softmax_attention/attention_config.h"

namespace hyb {

namespace {
const LayerEntry kLayers[] = {
    {"attention", make_attention_mixer, resolve_attention_config, &kAttentionKeys},
    {"mamba2", make_mamba2_mixer, resolve_mamba2_config, &kMamba2Keys},
    {"gated_deltanet", make_gated_deltanet_mixer, resolve_gated_deltanet_config, &kGatedDeltaNetKeys},
    {"gsa", make_gsa_mixer, resolve_gsa_config, &kGsaKeys},
    {"nha", make_nha_mixer, resolve_nha_config, &kNhaKeys},
    {"head_split", make_head_split_mixer, resolve_head_split_config, &kHeadSplitKeys},
    {"pha", nullptr, resolve_pha_config, &kPhaKeys, make_pha_block},
};
}  // namespace

std::span<const LayerEntry> layer_entries() { return kLayers; }

const LayerEntry* find_layer(std::string_view type) {
  for (const LayerEntry& e : kLayers)
    if (type == e.type) return &e;
  return nullptr;
}

std::vector<std::string> layer_types() {
  std::vector<std::string> out;
  for (const LayerEntry& e : kLayers) out.push_back(e.type);
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<Mixer> make_mixer(const nlohmann::json& mixer, const MixerContext& ctx) {
  const std::string type = mixer.at("type").get<std::string>();
  const LayerEntry* e = find_layer(type);
  HYB_CHECK(e, "layer ", ctx.layer_index, ": unknown mixer type \"", type, "\"");
  HYB_CHECK(e->make_mixer, "layer ", ctx.layer_index, ": a \"", type, "\" mixer builds its own block, not a mixer of the standard block");
  return e->make_mixer(mixer, ctx);
}

}  // namespace hyb
