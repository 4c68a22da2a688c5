#!/usr/bin/env bash
# Run ON THE DEVICE with the carried binaries (tools/build_carried.sh, carry ["build-carry"]): the PHA
# family's [gpu] tests (mixing, DSS, LayerNorm, the mixer for every branch subset, decoding), then
# `hybrid bench ops` on the DSS and the PHA-180M block with the PyTorch anchors of tools/pha_anchor.py
# (BENCH=0 skips), then the PHA and NHA quickstarts on Tiny Shakespeare (TRAIN=0 skips), each under its
# own timeout; logs under $OUT.
#   TAGS: the test filter (default the PHA family's and its primitives'); STEPS: quickstart steps.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
t=/tmp/hybrid-carried/bin/test_layers
tags=${TAGS:-"[pha],[pha_mix],[dss],[layernorm]"}
timeout "${TEST_TIMEOUT:-300}" "$t" "$tags" --durations yes > /tmp/hybrid-carried/tests.log 2>&1
echo "tests $tags: rc $?" | tee "$OUT/summary.txt"
grep -E "FAILED|passed|failed|^[0-9.]+ s:" /tmp/hybrid-carried/tests.log | tail -60 > "$OUT/tests.log"
grep -B3 -A25 "FAILED" /tmp/hybrid-carried/tests.log | head -200 >> "$OUT/tests.log"
if [ "${BENCH:-1}" != 0 ]; then
  timeout "${BENCH_TIMEOUT:-240}" "$h" bench ops --filter dss_fwd_bwd,pha_block_fwd_bwd --out "$OUT/bench.jsonl" \
    > "$OUT/bench.txt" 2>&1
  echo "bench: rc $?" | tee -a "$OUT/summary.txt"
  timeout "${ANCHOR_TIMEOUT:-300}" python3 tools/pha_anchor.py > "$OUT/anchor.txt" 2>&1
  echo "anchor: rc $?" | tee -a "$OUT/summary.txt"
fi
[ "${TRAIN:-1}" = 0 ] && exit 0
for cfg in pha_quickstart quickstart; do
  timeout "${TRAIN_TIMEOUT:-150}" "$h" train --config "configs/$cfg.json" ${STEPS:+--set train.steps=$STEPS} \
    --set "train.out_dir=\"/tmp/runs/$cfg\"" > "/tmp/hybrid-carried/$cfg.log" 2>&1
  echo "train $cfg: rc $?" | tee -a "$OUT/summary.txt"
  grep -E "model:|val_loss|tok/s" "/tmp/hybrid-carried/$cfg.log" | tail -8 >> "$OUT/summary.txt"
done
