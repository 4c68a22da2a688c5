// PHA on CUDA against the CPU in f64: the mixing op (f32 1e-5, bf16 2e-2), and the parallel mixer for
// every branch subset (output, input gradient and every parameter gradient, GSS's DSS included).
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "autograd/ops/cast.h"
#include "layers/pha/pha_cases.h"
#include "layers/pha/pha_mix_op.h"
#include "parity.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

std::unique_ptr<Mixer> build(const json& mixer, int64_t d_model) {
  return std::make_unique<PhaMixer>(pha_config_from_json(mixer, d_model),
                                    test_mixer_context({.d_model = d_model, .max_seq_len = 256, .num_layers = 2}), 1e-6);
}

}  // namespace

TEST_CASE("pha_mix on cuda matches the cpu reference for 2 and 3 branches: output, branch and logit gradients",
          "[pha_mix][gpu]") {
  for (int k : {2, 3}) {
    DYNAMIC_SECTION(k << " branches") {
      std::vector<Tensor> inputs;
      for (int i = 0; i < k; ++i) inputs.push_back(random_tensor({3, 37, 96}, 40 + uint64_t(i)));
      inputs.push_back(random_tensor({k}, 50, DType::f64, 1.5));
      auto r = cuda_parity(
          [k](const std::vector<Var>& x) {
            return std::vector<Var>{pha_mix(std::vector<Var>(x.begin(), x.begin() + k), cast(x[size_t(k)], DType::f32))};
          },
          inputs);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("the parallel PHA mixer on cuda matches the cpu mixer for every branch subset: output, input gradient and "
          "every parameter gradient",
          "[pha][gpu]") {
  const std::vector<std::pair<std::string, json>> with_attn = {
      {"attn gss ffn", pha_resolved(pha_cuda_written(), 16)},
      {"attn ffn", pha_resolved(pha_cuda_written({{"branches", {"attn", "ffn"}}}), 16)},
  };
  // The attention kernels compute in bf16 for f32 activations too (attention.md 4.4): the f32 run has
  // the attention branch's bf16 accuracy, at parameters of 0.1 as in head_split's test.
  require_cuda_mixer_matches_cpu(with_attn, build, {.tol_f32 = 2e-2, .tol_bf16 = 4e-2, .sd_f32 = 0.1});
  const std::vector<std::pair<std::string, json>> without_attn = {
      {"gss ffn", pha_resolved(pha_cuda_written({{"branches", {"gss", "ffn"}}}), 16)},
      {"gss", pha_resolved(pha_cuda_written({{"branches", {"gss"}}}), 16)},
      {"gss linear", pha_resolved(pha_cuda_written({{"branches", {"gss"}}, {"gss", {{"lambda_imag", "linear"}}}}), 16)},
  };
  require_cuda_mixer_matches_cpu(without_attn, build, {.tol_f32 = 1e-4, .tol_bf16 = 4e-2, .sd_f32 = 0.5});
}
