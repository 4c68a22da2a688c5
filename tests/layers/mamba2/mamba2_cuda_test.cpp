// The Mamba2 mixer on CUDA against the same mixer on the CPU in f64: output, input gradient and every
// parameter gradient, with f32 master parameters and f32 or bf16 activations; and decoding on CUDA
// (the conv step, the decay and the T = 1 SSD core on the device) against the CUDA parallel forward.
#include <catch2/catch.hpp>

#include "layers/mamba2/mamba2.h"
#include "layers/mamba2/mamba2_config.h"
#include "layers/mixer_test_util.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

json resolved(const json& written, int64_t d_model) {
  return resolve_test_mixer("mamba2", written, {.d_model = d_model, .max_seq_len = 256});
}

MixerContext mixer_context(int64_t d_model) {
  return test_mixer_context({.d_model = d_model, .max_seq_len = 256}, "family", true);
}

}  // namespace

TEST_CASE("the Mamba2 mixer on cuda matches the cpu mixer: output, input gradient and every parameter gradient",
          "[mamba2][gpu]") {
  const std::vector<std::pair<std::string, json>> variants = {
      {"G1 headdim 8 d_state 16", {{"headdim", 8}, {"d_state", 16}}},
      {"G2 headdim 8 d_state 12 norm_before_gate", {{"headdim", 8}, {"d_state", 12}, {"ngroups", 2}, {"norm_before_gate", true}}},
  };
  require_cuda_mixer_matches_cpu(variants, [](const json& mixer, int64_t d) -> std::unique_ptr<Mixer> {
    return std::make_unique<Mamba2Mixer>(mamba2_config_from_json(resolved(mixer, d)), mixer_context(d));
  });
}

TEST_CASE("Mamba2 decoding on cuda equals the cuda parallel forward: single steps and a prefill of 17", "[mamba2][gpu][decode]") {
  ParameterScope f32(Device::cuda(0), DType::f32);
  Mamba2Mixer layer(mamba2_config_from_json(resolved({{"headdim", 4}, {"d_state", 5}, {"ngroups", 2}}, 8)),
                    mixer_context(8));
  layer.initialize(7);
  randomize_parameters(layer, 8);
  require_mixer_decode_matches_forward(
      layer, {.device = Device::cuda(0), .dtype = DType::f32, .d_model = 8, .T = 83, .prefills = {0, 17}, .tol = 1e-4});
}
