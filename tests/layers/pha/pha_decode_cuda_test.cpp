// Decoding PHA on CUDA against the device's own parallel forward (specs/pha.md 14 item 6): the
// parallel mixer for every branch subset, and a small model of parallel, sequential and attention
// layers, token by token and after prefills.
#include <catch2/catch.hpp>

#include "compare.h"
#include "layers/pha/pha_cases.h"

using namespace hyb;
using json = nlohmann::json;

// The attention kernels compute in bf16 for f32 activations too (attention.md 4.4), and the parallel
// forward and a decode step hand them q, k and v from GEMMs of different shapes, which can round to
// different bf16 values: with attention the two paths agree to bf16 accuracy (head_split's 1e-2 at
// parameters of 0.3). Without it the difference is the fp32 FFT convolution against the fp32
// recurrence, both near 1e-6.
TEST_CASE("the parallel PHA mixer decoding on cuda equals its cuda parallel forward for every branch subset",
          "[pha][gpu][decode]") {
  struct Case {
    std::string name;
    json written;
    double tol;
  };
  for (const Case& c : {Case{"attn gss ffn", pha_cuda_written(), 1e-2},
                        Case{"attn ffn", pha_cuda_written({{"branches", {"attn", "ffn"}}}), 1e-2},
                        Case{"gss ffn", pha_cuda_written({{"branches", {"gss", "ffn"}}}), 1e-4},
                        Case{"gss linear", pha_cuda_written({{"branches", {"gss"}}, {"gss", {{"lambda_imag", "linear"}}}}), 1e-4}}) {
    ParameterScope f32(Device::cuda(0), DType::f32);
    PhaMixer mixer(pha_config_from_json(pha_resolved(c.written, 16), 16),
                   test_mixer_context({.d_model = 16, .max_seq_len = 256, .num_layers = 2}), 1e-6);
    mixer.initialize(7);
    randomize_parameters(mixer, 8, 0.3);
    require_mixer_decode_matches_forward(mixer, {.device = Device::cuda(0), .dtype = DType::f32, .d_model = 16, .T = 70,
                                                 .prefills = {0, 1, 17}, .tol = c.tol, .name = c.name + " "});
  }
}

TEST_CASE("a small PHA model decoding on cuda equals its cuda parallel forward's logits: single steps and prefills",
          "[pha][model][gpu][decode]") {
  const int64_t L = 3, B = 2, T = 40;
  json seq = pha_cuda_written({{"composition", "sequential"}});
  seq.erase("aux_mlp");
  const json attention = resolve_test_mixer("attention", {{"num_heads", 4}, {"num_kv_heads", 2}, {"head_dim", 8}},
                                            {.d_model = 16});
  LmConfig cfg = small_decode_lm({{pha_resolved(pha_cuda_written(), 16, L), "swiglu", 24},
                                  {attention, "swiglu", 24},
                                  {pha_resolved(seq, 16, L), "swiglu", 24}});
  cfg.d_model = 16;
  ParameterScope f32(Device::cuda(0), DType::f32);
  CausalLM lm(cfg);
  lm.initialize(11);
  randomize_parameters(lm, 12, 0.3);
  NoGradGuard no_grad;
  std::vector<int32_t> v;
  for (int64_t i = 0; i < B * T; ++i) v.push_back(int32_t((i * 5 + 1) % 13));
  const Tensor ids = Tensor::from_vector<int32_t>(v, {B, T}).to(Device::cuda(0));
  auto logits_of = [&](const Var& z, int64_t n) { return z.data().to(Device::cpu()).to(DType::f64).reshape({B, n, -1}); };
  const Tensor full = logits_of(lm.logits(ids, DType::f32), T);
  for (int64_t prefill : {1, 17}) {
    DYNAMIC_SECTION("prefill " << prefill) {
      LmDecodeState st = lm.start_decode(B, Device::cuda(0), DType::f32);
      std::vector<Tensor> steps{logits_of(lm.decode_logits(ids.narrow(1, 0, prefill).contiguous(), st, DType::f32), prefill)};
      for (int64_t t = prefill; t < T; ++t)
        steps.push_back(logits_of(lm.decode_logits(ids.narrow(1, t, 1).contiguous(), st, DType::f32), 1));
      require_rows_match(steps, full, 2e-2);
      for (const auto& layer : st.layers) REQUIRE(layer->n_seen == T);
    }
  }
}
