#!/usr/bin/env bash
# Run ON THE DEVICE, kind nvidia-h200-x4, carrying build-carry (tools/build_carried.sh): the 4-GPU
# figures of docs/distributed.md in one call.
#   1. equality in fp32 (quickstart, 20 steps): 1 GPU with batch 16 against 4 ranks with 4 each,
#      plain and with ZeRO-1 (0.25 MiB buckets): max relative difference of the train loss, the
#      grad norm and the validation loss;
#   2. weak scaling (tools/device_dp_scaling.sh) at 1, 2 and 4 GPUs, with and without ZeRO-1, on the
#      GPT-2-124M shape (DP_MICRO_GPT2, 64 x 1024 tokens per GPU) and on nha_340m (DP_MICRO_HYBRID, 16).
# Results under $OUT: summary.txt, gpt2/scaling.txt, nha/scaling.txt. NCCL_NVLS_ENABLE=0 for every rank.
# SKIP_EQ=1 / SKIP_GPT2=1 leave parts out; DP_NPROCS_HYBRID, DP_STEPS_HYBRID shorten the hybrid's part.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$(pwd)/device-out}
mkdir -p "$OUT"
source tools/device_carried_bins.sh
summary=$OUT/summary.txt
: > "$summary"
row() { printf '%-44s %s\n' "$1" "$2" | tee -a "$summary"; }
row "gpus" "$(nvidia-smi -L | wc -l); built from $(head -1 build-carry/commit); NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset}"

eq=(--config configs/quickstart.json --set train.steps=20 --set train.precision='"fp32"' --set train.eval_interval=10
    --set train.checkpoint_interval=0 --set train.log_interval=1 --set eval.max_windows=16
    --set train.schedule.warmup_steps=5)
if [ "${SKIP_EQ:-0}" != 1 ]; then
$h train "${eq[@]}" --set train.out_dir='"runs/eq1"' > "$OUT/eq1.log" 2>&1; row "eq: 1 GPU batch 16" "rc $?"
timeout 120 $h launch --nproc-per-node 4 -- train "${eq[@]}" --set train.out_dir='"runs/eq4"' > "$OUT/eq4.log" 2>&1
row "eq: 4 ranks x 4" "rc $?"
timeout 120 $h launch --nproc-per-node 4 -- train "${eq[@]}" --set train.out_dir='"runs/eq4z"' \
  --set train.data_parallel.zero1=true --set train.data_parallel.bucket_mb=0.25 > "$OUT/eq4z.log" 2>&1
row "eq: 4 ranks x 4, ZeRO-1, 0.25 MiB buckets" "rc $?"
python3 - <<'PY' | tee -a "$summary"
import json
def recs(run, kind, field):
    return [json.loads(l)[field] for l in open(f"runs/{run}/metrics.jsonl") if json.loads(l)["kind"] == kind]
def rel(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
ref = {k: recs("eq1", *k) for k in [("train", "loss"), ("train", "grad_norm"), ("ppl", "loss")]}
for run in ["eq4", "eq4z"]:
    try:
        errs = ", ".join(f"{k[0]}.{k[1]} {rel(recs(run, *k), v):.2e}" for k, v in ref.items())
    except FileNotFoundError as e:
        errs = f"missing {e.filename}"
    print(f"{'max rel diff vs 1 GPU: ' + run:<44} {errs}")
PY
fi
[ "${SKIP_GPT2:-0}" = 1 ] || OUT=$OUT/gpt2 DP_NPROCS="2 4" DP_MICRO=${DP_MICRO_GPT2:-64} bash tools/device_dp_scaling.sh 2>&1 | tail -12 | tee -a "$summary"
# nha_340m names FineWeb shards the device does not have: the bundled Tiny Shakespeare stands in.
OUT=$OUT/nha DP_NPROCS=${DP_NPROCS_HYBRID:-"2 4"} DP_MICRO=${DP_MICRO_HYBRID:-16} DP_STEPS=${DP_STEPS_HYBRID:-20} \
  DP_CONFIG=configs/nha_340m.json DP_SET="--set data.train=\"data/ts/ts.train.bin\" --set data.val=\"data/ts/ts.val.bin\"" \
  bash tools/device_dp_scaling.sh 2>&1 | tail -12 | tee -a "$summary"
