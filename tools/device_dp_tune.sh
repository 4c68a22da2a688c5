#!/usr/bin/env bash
# Run ON THE DEVICE, kind nvidia-h200-x2, carrying build-carry (tools/build_carried.sh): `hybrid bench dp`
# on the GPT-2-124M shape, 1 GPU and then 2 GPUs once per setting in DP_ENVS (";"-separated lists of
# VAR=VALUE, "-" for none), with the phase split of each step, to find where the data-parallel step
# loses time against one GPU. Results: $OUT/dp_tune.txt. DP_CLOCKS=1 also samples every GPU's SM clock,
# power and throttle reasons each 20 ms ($OUT/clocks.csv) and keeps each run's log with the times of
# its sections ($OUT/run_*.log), to tell a slower kernel from a slower clock.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
log=$OUT/dp_tune.txt
if [ "${DP_CLOCKS:-0}" = 1 ]; then
  nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader -lms 20 > "$OUT/clocks.csv" 2>&1 &
  sampler=$!
  trap 'kill $sampler 2>/dev/null' EXIT
fi
steps=${DP_STEPS:-20}
{ echo "built from $(head -1 build-carry/commit)"; echo "== 1 GPU";
  $h bench dp --config configs/gpt2_124m.json --set train.batch_size=16 --steps "$steps" 2>&1 | tee "$OUT/run_0.log" | tail -1; } >> "$log"
IFS=';' read -ra settings <<< "${DP_ENVS:--}"
run=0
for e in "${settings[@]}"; do
  run=$((run + 1))
  vars=(); [ "$e" != "-" ] && read -ra vars <<< "$e"
  echo "== 2 GPUs, ${e} ${DP_SETS:-}" >> "$log"
  env "${vars[@]}" timeout 120 $h launch --nproc-per-node 2 -- bench dp --config configs/gpt2_124m.json \
    --set train.batch_size=32 ${DP_SETS:-} --steps "$steps" 2>&1 | tee "$OUT/run_$run.log" | tail -1 >> "$log"
done
cat "$log"
