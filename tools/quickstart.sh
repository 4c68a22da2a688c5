#!/usr/bin/env bash
# The quickstart: set up, build, tokenize Tiny Shakespeare with GPT-2 BPE, train the small model of
# configs/quickstart.json (CUDA when a GPU is visible, else the CPU), evaluate it, sample from it and
# draw its loss curve. A second run resumes (or just re-evaluates) the run in runs/quickstart;
# `tools/quickstart.sh --fresh` starts over. Extra arguments go to `hybrid train` (--set ...).
set -euo pipefail
cd "$(dirname "$0")/.."
fresh=0
if [ "${1:-}" = "--fresh" ]; then fresh=1; shift; fi
tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j "$(nproc)"
h=build/hybrid
[ -f data/ts/ts.val.bin ] || $h tokenize --preset tinyshakespeare --tokenizer gpt2 --out data/ts
run=runs/quickstart
[ $fresh -eq 1 ] && rm -rf "$run"
if [ -d "$run/ckpt" ] && ls "$run/ckpt" | grep -q '^step_[0-9]*$'; then
  $h train --resume "$run" --config configs/quickstart.json "$@"
else
  $h train --config configs/quickstart.json "$@"
fi
$h eval --checkpoint "$run"
$h generate --checkpoint "$run" --prompt "ROMEO:" --max-new-tokens 80 --temperature 0.8 --top-k 40 --seed 1
$h plot "$run/metrics.jsonl" -o "$run/loss.svg"
