// The `hybrid` command line. One line per verb; each verb lives in its own file.
// Errors from the library arrive as hyb::Error: one line on stderr and exit status 2 (config.md 8.2).
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/cli.h"

namespace hyb {
int cmd_ablate(Args& args);
int cmd_bench(Args& args);
int cmd_config(Args& args);
int cmd_eval(Args& args);
int cmd_generate(Args& args);
int cmd_launch(Args& args);
int cmd_plot(Args& args);
int cmd_tokenize(Args& args);
int cmd_train(Args& args);

const CliCommand kCommands[] = {
    {"help", "list the commands", nullptr},
    {"ablate", "train and evaluate every row of a paper's ablation table and print it with verdicts: ablate SUITE.json [--seeds 0,1,2] [--rows ...] [--resume RUNDIR] [--dry-run] [--jobs K]", cmd_ablate},
    {"bench", "time the CUDA kernels against the copy and GEMM ceilings (bench ops), or one decode step at a long context (bench decode)", cmd_bench},
    {"config", "show the resolved config: config show FILE [--set PATH=VALUE ...] [--layers | --params]; config keys", cmd_config},
    {"eval", "loss, perplexity and bits per byte of a checkpoint: eval --checkpoint DIR [--data SHARD...] [--set ...]; MQAR recall: eval mqar --checkpoint DIR [--preset P]; needle in a haystack: eval niah --checkpoint DIR [--lengths L...] [--depths P...] [--svg FILE]; PHA mixing weights: eval probes --checkpoint DIR [--window K]", cmd_eval},
    {"generate", "sample text from a checkpoint with its decode caches: generate --checkpoint DIR --prompt TEXT", cmd_generate},
    {"launch", "run a command on N ranks (data parallel): launch --nproc-per-node N [--nnodes K --node-rank R --master-addr A --master-port P] -- train ...", cmd_launch},
    {"plot", "draw train/val loss curves of a metrics.jsonl as SVG", cmd_plot},
    {"tokenize", "text to llm.c token shards and a manifest (--preset tinyshakespeare|brown or --input FILE...)", cmd_tokenize},
    {"train", "train a model: train --config FILE [--set PATH=VALUE ...] [--resume DIR]", cmd_train},
};
}  // namespace hyb

static void print_usage() {
  std::puts("usage: hybrid <command> [options]\n\ncommands:");
  for (const auto& c : hyb::kCommands) std::printf("  %-10s %s\n", c.name, c.summary);
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string verb = argv[1];
  for (const auto& c : hyb::kCommands) {
    if (verb != c.name || !c.run) continue;
    hyb::Args args(verb, std::vector<std::string>(argv + 2, argv + argc));
    try {
      return c.run(args);
    } catch (const hyb::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hybrid %s: %s\n", verb.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "hybrid: unknown command \"%s\" (see hybrid --help)\n", verb.c_str());
  return 2;
}
