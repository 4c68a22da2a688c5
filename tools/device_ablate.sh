#!/usr/bin/env bash
# Run ON THE DEVICE from the repository root with the binaries of tools/build_carried.sh (carry
# ["build-carry"]): runs `hybrid ablate` on each suite of SUITES (default the NHA Table 6 suite), each
# under its own timeout, and keeps under $OUT/<suite>/ its printed output, table.md, results.jsonl and
# the run directory without checkpoints as run.tar (files come back at most two folders down), so a
# later call that carries that file back as RESUME_ROOT/<suite>/run.tar continues it with --resume.
#   SUITES="configs/ablate/nha_t6.json" ABLATE_ARGS="--seeds 0,1" bash tools/device_ablate.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
echo "built from $(head -1 "${CARRIED_BUILD:-build-carry}/commit")"
for suite in ${SUITES:-configs/ablate/nha_t6.json}; do
  name=$(basename "$suite" .json)
  run=/tmp/ablate/$name
  rm -rf "$run"
  mkdir -p /tmp/ablate "$OUT/$name"
  resume=()
  if [ -n "${RESUME_ROOT:-}" ] && [ -f "$RESUME_ROOT/$name/run.tar" ]; then
    tar -C /tmp/ablate -xf "$RESUME_ROOT/$name/run.tar"
    resume=(--resume "$run")
  else
    resume=(--out "$run")
  fi
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout "${ABLATE_TIMEOUT:-540}" "$h" ablate "$suite" "${resume[@]}" --jobs "${JOBS:-4}" ${ABLATE_ARGS:-} > "$OUT/$name/ablate.log" 2>&1
  echo "$suite: rc $? in $(( $(date +%s) - start )) s"
  cp "$run"/table.md "$run"/results.jsonl "$OUT/$name/" 2>/dev/null
  tar -C /tmp/ablate --exclude=ckpt -cf "$OUT/$name/run.tar" "$name"
done
