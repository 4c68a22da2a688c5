// `hybrid config show FILE [--set PATH=VALUE ...] [--layers | --params]` (config.md 3.7): the
// resolved config on stdout (the config.json a run with it would write) and its hash on stderr;
// `--layers` prints one line per layer instead, `--params` one line per parameter.
// `hybrid config keys` prints the key reference of docs/configs.md.
#include <cstdio>
#include <iostream>

#include "train/cli.h"
#include "train/config/config_layers_view.h"
#include "train/config/config_params_view.h"
#include "train/config/config_resolve.h"
#include "train/config/config_schema.h"

namespace hyb {

int cmd_config(Args& args) {
  const std::vector<std::string> sets = args.values("--set");
  const bool layers = args.flag("--layers");
  const bool params = args.flag("--params");
  const std::vector<std::string> pos = args.positional();
  args.finish();
  HYB_CHECK(!pos.empty(), "config: expected a subcommand: show FILE [--set PATH=VALUE ...] [--layers | --params], or keys");
  if (pos[0] == "keys") {
    HYB_CHECK(pos.size() == 1 && sets.empty() && !layers && !params, "config keys: takes no arguments");
    std::cout << config_reference_markdown();
    return 0;
  }
  HYB_CHECK(pos[0] == "show", "config: unknown subcommand \"", pos[0], "\" (show or keys)");
  HYB_CHECK(pos.size() == 2, "config show: expected one config file (hybrid config show FILE [--set PATH=VALUE ...] [--layers | --params])");
  HYB_CHECK(!(layers && params), "config show: --layers and --params exclude each other");
  ResolveOptions options;
  options.require_train = false;
  const RunConfig rc = load_run_config(pos[1], sets, options);
  if (layers) std::cout << layers_view(rc);
  else if (params) std::cout << params_view(rc);
  else std::cout << rc.resolved.dump(2) << "\n";
  std::cerr << "config_sha256: " << rc.sha256 << "\n";
  return 0;
}

}  // namespace hyb
