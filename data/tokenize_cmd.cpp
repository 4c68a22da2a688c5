// `hybrid tokenize`: text to llm.c token shards and a manifest (docs/data.md).
//   hybrid tokenize --preset tinyshakespeare|brown --tokenizer gpt2|byte --out DIR
//   hybrid tokenize --input FILE... --tokenizer gpt2|byte --out DIR [--val-fraction F] [--shard-tokens N]
// The second form writes DIR/train_000000.bin ... and, with F > 0, DIR/val_000000.bin ... holding
// the last floor(F n) tokens; shards hold at most N tokens (default 10^8, as llm.c's fineweb.py).
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "data/shard.h"
#include "data/tokenize.h"
#include "train/cli.h"

namespace hyb {

namespace {

constexpr const char* kUsage =
    "usage: hybrid tokenize --preset tinyshakespeare|brown --tokenizer gpt2|byte --out DIR\n"
    "       hybrid tokenize --input FILE... --tokenizer gpt2|byte --out DIR [--val-fraction F] [--shard-tokens N]\n";

void add_shards(const std::string& prefix, const uint16_t* begin, const uint16_t* end, int64_t shard_tokens,
                std::vector<TokenSplit>& out) {
  for (int64_t k = 0; k == 0 || begin < end; ++k) {
    const uint16_t* stop = begin + std::min<int64_t>(shard_tokens, end - begin);
    char name[32];
    std::snprintf(name, sizeof name, "%s_%06lld", prefix.c_str(), static_cast<long long>(k));
    out.push_back({name, std::vector<uint16_t>(begin, stop)});
    begin = stop;
  }
}

}  // namespace

int cmd_tokenize(Args& args) {
  if (args.flag("--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string preset = args.value("--preset", "");
  const std::vector<std::string> inputs = args.values("--input");
  const std::string tokenizer = args.value("--tokenizer", "gpt2");
  const std::string out = args.value("--out");
  const auto val_fraction = args.get("--val-fraction");
  const double f = args.number("--val-fraction", 0.0);
  const int64_t shard_tokens = args.integer("--shard-tokens", 100000000);
  args.finish();
  HYB_CHECK(preset.empty() != inputs.empty(), "tokenize: give either --preset or --input\n", kUsage);
  auto tok = make_tokenizer(tokenizer);
  nlohmann::json info = {{"format", "llm.c .bin: 256 x int32 header (20240520, 1, tokens), uint16 tokens"},
                         {"tokenizer", tok->name()},
                         {"vocab_size", tok->vocab_size()}};
  std::vector<TokenSplit> splits;
  if (!preset.empty()) {
    HYB_CHECK(!val_fraction, "tokenize: --val-fraction does not apply to --preset (the splits are those of eval.md 1.1)");
    nlohmann::json source;
    splits = preset_splits(preset, *tok, &source);
    info["preset"] = preset;
    info["source"] = source;
  } else {
    HYB_CHECK(f >= 0.0 && f < 1.0, "tokenize: --val-fraction must be in [0, 1), got ", f);
    HYB_CHECK(shard_tokens >= 1 && shard_tokens <= kShardMaxTokens, "tokenize: --shard-tokens must be in [1, ",
              kShardMaxTokens, "], got ", shard_tokens);
    std::vector<uint16_t> all;
    nlohmann::json sources;
    tokenize_files(inputs, *tok, all, &sources);
    const int64_t n = int64_t(all.size()), n_val = int64_t(std::floor(f * double(n)));
    add_shards("train", all.data(), all.data() + (n - n_val), shard_tokens, splits);
    if (n_val > 0) add_shards("val", all.data() + (n - n_val), all.data() + n, shard_tokens, splits);
    info["inputs"] = sources;
    info["val_fraction"] = f;
  }
  write_token_splits(out, splits, info);
  return 0;
}

}  // namespace hyb
