// `hybrid generate --checkpoint DIR --prompt TEXT [--max-new-tokens N] [--temperature X] [--top-k K]
//  [--seed S] [--set PATH=VALUE ...]`: prefill the prompt through every layer's decode state (KV caches,
// ring buffers for windowed layers), then sample one token at a time from the cached state.
#include <cstdio>

#include "data/tokenizer.h"
#include "eval/sampling.h"
#include "train/checkpoint_model.h"
#include "train/cli.h"

namespace hyb {

int cmd_generate(Args& args) {
  const std::string dir = args.value("--checkpoint");
  const std::string prompt = args.value("--prompt");
  const int64_t n_new = args.integer("--max-new-tokens", 100);
  SamplingOptions so{args.number("--temperature", 1.0), args.integer("--top-k", 0)};
  const uint64_t seed = uint64_t(args.integer("--seed", 0));
  std::vector<std::string> sets = args.values("--set");
  args.finish();
  HYB_CHECK(n_new >= 0, "generate: --max-new-tokens must be >= 0, got ", n_new);
  LoadedModel lm = load_model_from_checkpoint(dir, sets);
  auto tok = make_tokenizer(lm.config.data.tokenizer);
  std::vector<int32_t> ids = tok->encode(prompt);
  HYB_CHECK(!ids.empty(), "generate: the prompt is empty");
  NoGradGuard no_grad;
  lm.model->set_training(false);
  LmDecodeState state = lm.model->start_decode(1, lm.device, lm.compute);
  RngStream rng(seed, "generate");
  const int64_t vocab = lm.model->config().real_vocab;
  Tensor next = Tensor::from_vector<int32_t>(ids, {1, int64_t(ids.size())});
  std::printf("%s", prompt.c_str());
  for (int64_t i = 0; i < n_new; ++i) {
    Tensor logits = lm.model->decode_logits(next.to(lm.device), state, lm.compute).data();
    Tensor last = logits.select(0, logits.size(0) - 1);
    const int32_t id = sample_token(last.to_double_vector(), vocab, so, rng);
    if (tok->eot() && id == *tok->eot()) break;
    const std::string piece = tok->decode(std::vector<int32_t>{id});
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    next = Tensor::from_vector<int32_t>({id}, {1, 1});
  }
  std::printf("\n");
  return 0;
}

}  // namespace hyb
