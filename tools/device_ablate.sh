#!/usr/bin/env bash
# Run ON THE DEVICE from the repository root with the binaries of tools/build_carried.sh (carry
# ["build-carry"]): runs `hybrid ablate` on each suite of SUITES (default the NHA Table 6 suite), each
# under its own timeout, and keeps under $OUT per suite its printed output, table.md, results.jsonl
# and the logs of units that did not finish (the checkpoints stay behind).
#   SUITES="configs/ablate/nha_t6.json configs/ablate/nha_t8.json" ABLATE_ARGS="--seeds 0,1" bash tools/device_ablate.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
echo "built from $(head -1 "${CARRIED_BUILD:-build-carry}/commit")"
for suite in ${SUITES:-configs/ablate/nha_t6.json}; do
  name=$(basename "$suite" .json)
  run=/tmp/ablate/$name
  rm -rf "$run"
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout "${ABLATE_TIMEOUT:-540}" "$h" ablate "$suite" --out "$run" --jobs "${JOBS:-4}" ${ABLATE_ARGS:-} > "$OUT/$name.log" 2>&1
  echo "$suite: rc $? in $(( $(date +%s) - start )) s"
  mkdir -p "$OUT/$name"
  cp "$run"/table.md "$run"/results.jsonl "$OUT/$name/" 2>/dev/null
  for unit in "$run"/rows/*/*/seed* "$run"/probe/*; do
    [ -f "$unit/result.json" ] && continue
    [ -f "$unit/log.txt" ] && cp "$unit/log.txt" "$OUT/$name/$(echo "${unit#"$run"/}" | tr / _).log"
  done
done
