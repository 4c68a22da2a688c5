#!/usr/bin/env bash
# Run ON THE DEVICE from the repository root (carry .deps): tools/device_check.sh (build, every test
# with [gpu], memcheck, `hybrid bench ops`), then the quickstart on the GPU and the PyTorch SDPA
# anchor, all in one call. Logs are packed into $OUT/logs.tar.gz (the device tool returns at most 8
# files); $OUT/summary.txt, bench.log and quickstart.log stay readable.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$(pwd)/device-out}
mkdir -p "$OUT"
bash tools/device_check.sh
source tools/device_env.sh
h=build-device/hybrid
{
  echo "== quickstart on the GPU"
  t0=$(date +%s)
  $h tokenize --preset tinyshakespeare --tokenizer gpt2 --out data/ts && \
  $h train --config configs/quickstart.json --set 'train.out_dir="runs/qs_gpu"' && \
  $h eval --checkpoint runs/qs_gpu && \
  $h generate --checkpoint runs/qs_gpu --prompt "ROMEO:" --max-new-tokens 60 --temperature 0.8 --top-k 40 --seed 1
  echo "quickstart rc $? in $(( $(date +%s) - t0 )) s"
} > "$OUT/quickstart.log" 2>&1
timeout 240 python3 tools/sdpa_anchor.py > "$OUT/sdpa.log" 2>&1
(cd "$OUT" && tar czf logs.tar.gz --exclude=logs.tar.gz --exclude=summary.txt --exclude=bench.log --exclude=quickstart.log --exclude=sdpa.log . && \
  find . -maxdepth 1 -type f ! -name logs.tar.gz ! -name summary.txt ! -name bench.log ! -name quickstart.log ! -name sdpa.log -delete)
tail -5 "$OUT/quickstart.log"
echo "== sdpa"; tail -12 "$OUT/sdpa.log"
echo "== summary"; cat "$OUT/summary.txt"
