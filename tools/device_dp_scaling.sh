#!/usr/bin/env bash
# Run ON THE DEVICE (any kind with several GPUs), carrying build-carry (tools/build_carried.sh): weak
# scaling of `hybrid bench dp` on DP_CONFIG (default the GPT-2-124M shape), DP_MICRO (16) sequences of 1024 tokens per GPU and
# micro-step, DP_ACCUM (1) micro-steps per optimizer step, bf16, at 1 GPU and
# at each count in DP_NPROCS (default: 2 and, where present, 4 and 8 up to the GPUs visible), each
# with and without ZeRO-1 (train.data_parallel.zero1). Per run: tokens/s per GPU, weak-scaling
# efficiency against the 1-GPU run of the same call, the share of the reduction hidden behind
# backward, and the caching allocator's peak per GPU. Results: $OUT/scaling.txt (table) and one
# JSON per run. NCCL_NVLS_ENABLE=0 for every rank (device_env.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
gpus=$(nvidia-smi -L | wc -l)
procs=${DP_NPROCS:-$(for n in 2 4 8; do [ "$n" -le "$gpus" ] && echo -n "$n "; done)}
steps=${DP_STEPS:-20}
micro=${DP_MICRO:-16}
accum=${DP_ACCUM:-1}
# DP_SET: more `--set key=value` words for the config (e.g. a data path the device has).
bench=(bench dp --config "${DP_CONFIG:-configs/gpt2_124m.json}" --steps "$steps" --set train.grad_accum=$accum ${DP_SET:-})
echo "built from $(head -1 build-carry/commit); $gpus GPUs; runs: 1 and $procs; $micro x 1024 tokens per GPU and micro-step, $accum micro-steps" | tee "$OUT/scaling.log"
$h "${bench[@]}" --set train.batch_size=$((micro * accum)) --out "$OUT/dp_1.json" >> "$OUT/scaling.log" 2>&1
echo "1 GPU: rc $?"
for n in $procs; do
  for zero in false true; do
    timeout 300 $h launch --nproc-per-node "$n" -- "${bench[@]}" --set train.batch_size=$((micro * accum * n)) \
      --set train.data_parallel.zero1=$zero --out "$OUT/dp_${n}_zero1_${zero}.json" >> "$OUT/scaling.log" 2>&1
    echo "$n GPUs, zero1 $zero: rc $?"
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/scaling.txt"
import glob, json, sys
out = sys.argv[1]
one = json.load(open(f"{out}/dp_1.json"))
base = one["local_tokens_per_s_per_gpu"]
print(f"per GPU: {one['batch_per_rank']} x {one['seq_len']} tokens a micro-step, {one['grad_accum']} micro-steps a step")
print("| GPUs | ZeRO-1 | step ms | tokens/s per GPU | efficiency | hidden | reduction alone ms | peak MiB (dp / local) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
print(f"| 1 | - | {one['local_step_ms']:.2f} | {base:.0f} | 1 | - | - | {one['local_peak_allocated_mib']:.0f} |")
def key(f):
    r = json.load(open(f))
    return (r["ranks"], r["zero1"])
for f in sorted(glob.glob(f"{out}/dp_*_zero1_*.json"), key=key):
    r = json.load(open(f))
    print(f"| {r['ranks']} | {'yes' if r['zero1'] else 'no'} | {r['dp_step_ms']:.2f} | {r['dp_tokens_per_s_per_gpu']:.0f} | "
          f"{r['dp_tokens_per_s_per_gpu'] / base:.3f} | {r['hidden_fraction']:.2f} | {r['comm_only_ms']:.2f} | "
          f"{r['dp_peak_allocated_mib']:.0f} / {r['local_peak_allocated_mib']:.0f} |")
PY
