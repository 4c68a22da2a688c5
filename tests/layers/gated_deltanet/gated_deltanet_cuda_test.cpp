// The Gated DeltaNet mixer on CUDA against the same mixer on the CPU in f64: output, input gradient
// and every parameter gradient, with f32 master parameters and f32 or bf16 activations, HV = H and
// HV = 2H; and decoding on CUDA against the CUDA parallel forward.
#include <catch2/catch.hpp>

#include "layers/gated_deltanet/gated_deltanet.h"
#include "layers/gated_deltanet/gated_deltanet_config.h"
#include "layers/mixer_test_util.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

json resolved(const json& written, int64_t d_model) {
  return resolve_test_mixer("gated_deltanet", written, {.d_model = d_model, .max_seq_len = 256});
}

MixerContext mixer_context(int64_t d_model) {
  return test_mixer_context({.d_model = d_model, .max_seq_len = 256}, "family", true);
}

}  // namespace

TEST_CASE("the Gated DeltaNet mixer on cuda matches the cpu mixer: output, input gradient and every parameter gradient",
          "[gated_deltanet][gpu]") {
  const std::vector<std::pair<std::string, json>> variants = {
      {"H 2 HV 2 K 8 V 12", {{"num_heads", 2}, {"head_dim", 8}, {"expand_v", 1.5}}},
      {"H 2 HV 4 K 8 V 8 allow_neg_eigval", {{"num_heads", 2}, {"num_v_heads", 4}, {"head_dim", 8}, {"expand_v", 1.0},
                                             {"allow_neg_eigval", true}}},
  };
  require_cuda_mixer_matches_cpu(variants, [](const json& mixer, int64_t d) -> std::unique_ptr<Mixer> {
    return std::make_unique<GatedDeltaNetMixer>(gated_deltanet_config_from_json(resolved(mixer, d)), mixer_context(d));
  });
}

TEST_CASE("Gated DeltaNet decoding on cuda equals the cuda parallel forward: single steps and a prefill of 17",
          "[gated_deltanet][gpu][decode]") {
  ParameterScope f32(Device::cuda(0), DType::f32);
  GatedDeltaNetMixer layer(
      gated_deltanet_config_from_json(resolved({{"num_heads", 2}, {"num_v_heads", 4}, {"head_dim", 4}, {"expand_v", 1.5}}, 8)),
      mixer_context(8));
  layer.initialize(7);
  randomize_parameters(layer, 8);
  require_mixer_decode_matches_forward(
      layer, {.device = Device::cuda(0), .dtype = DType::f32, .d_model = 8, .T = 83, .prefills = {0, 17}, .tol = 1e-4});
}
