#!/usr/bin/env bash
# Run ON THE DEVICE (a kind with several GPUs), carrying build-carry (tools/build_carried.sh): how much of
# the weak-scaling loss of `hybrid bench dp` is the host's and not data parallelism's. The same per-GPU
# work (GPT-2-124M shape, DP_MICRO (16) x 1024 tokens, DP_ACCUM (1) micro-steps, bf16) runs
#   alone:      one GPU, the others idle;
#   dp:         data parallel on DP_NPROC (2) GPUs;
#   concurrent: DP_NPROC independent one-GPU jobs at once, no communication between them;
#   alone_again: one GPU again, to show drift over the call (warmer GPUs).
# while nvidia-smi samples every GPU's SM clock, power, temperature and throttle reasons each 50 ms.
# If `concurrent` is as slow per step as `dp`'s local steps, the loss is in the host (power, heat,
# clocks), and dp's cost against `concurrent` is what communication adds. Results: $OUT/host.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
n=${DP_NPROC:-2}
micro=${DP_MICRO:-16}
accum=${DP_ACCUM:-1}
bench=(bench dp --config configs/gpt2_124m.json --steps "${DP_STEPS:-20}" --set train.grad_accum=$accum)
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader,nounits -lms 50 > "$OUT/clocks.csv" 2>&1 &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
marks=$OUT/marks.txt
: > "$marks"
mark() { echo "$1 $(date +%s.%N)" >> "$marks"; }
one() {  # one one-GPU run on GPU $1, result $2
  CUDA_VISIBLE_DEVICES=$1 $h "${bench[@]}" --set train.batch_size=$((micro * accum)) --out "$2" > "$2.log" 2>&1
}
sleep 2
mark alone; one 0 "$OUT/alone.json"; mark end
mark dp
timeout 300 $h launch --nproc-per-node "$n" -- "${bench[@]}" --set train.batch_size=$((micro * accum * n)) \
  --out "$OUT/dp.json" > "$OUT/dp.log" 2>&1
mark end
mark concurrent
for ((g = 0; g < n; ++g)); do one $g "$OUT/concurrent_$g.json" & done
wait $(jobs -p | grep -v "^$sampler$")
mark end
mark alone_again; one 0 "$OUT/alone_again.json"; mark end
sleep 1
kill $sampler 2>/dev/null
python3 - "$OUT" "$n" <<'PY' | tee "$OUT/host.txt"
import datetime, json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
def load(name):
    try:
        return json.load(open(f"{out}/{name}.json"))
    except (OSError, ValueError):
        return None
samples = []  # (unix time, gpu, sm MHz, W, C, throttle)
for line in open(f"{out}/clocks.csv"):
    f = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
        samples.append((t, int(f[1]), float(f[2]), float(f[3]), float(f[4]), f[5]))
    except (ValueError, IndexError):
        pass
spans, open_run = [], None
for line in open(f"{out}/marks.txt"):
    what, t = line.split()
    if what == "end": spans.append((open_run[0], open_run[1], float(t)))
    else: open_run = (what, float(t))
# nvidia-smi's timestamps are the host's local time, the marks' are Unix time.
off = -datetime.datetime.now().astimezone().utcoffset().total_seconds()
one = load("alone")
base = one["local_step_ms"] if one else float("nan")
if one:
    print(f"per GPU: {one['batch_per_rank']} x {one['seq_len']} tokens a micro-step, {one['grad_accum']} micro-steps; {n} GPUs")
print("| run | step ms | against alone | per GPU: median SM MHz / W / C during the run |")
print("| --- | --- | --- | --- |")
for what, t0, t1 in spans:
    if what == "dp":
        r = load("dp")
        step = f"{r['dp_step_ms']:.2f} (dp), {r['local_step_ms']:.2f} (its local steps)" if r else "failed"
        ratio = f"{base / r['dp_step_ms']:.3f} / {base / r['local_step_ms']:.3f}" if r else "-"
    elif what == "concurrent":
        rs = [load(f"concurrent_{g}") for g in range(n)]
        step = ", ".join(f"{r['local_step_ms']:.2f}" if r else "failed" for r in rs)
        ratio = ", ".join(f"{base / r['local_step_ms']:.3f}" if r else "-" for r in rs)
    else:
        r = load(what)
        step = f"{r['local_step_ms']:.2f}" if r else "failed"
        ratio = f"{base / r['local_step_ms']:.3f}" if r else "-"
    per = []
    for g in range(n):
        s = [x for x in samples if x[1] == g and t0 <= x[0] + off <= t1]
        per.append(f"GPU{g} {statistics.median(x[2] for x in s):.0f} / {statistics.median(x[3] for x in s):.0f} / "
                   f"{statistics.median(x[4] for x in s):.0f}" if s else f"GPU{g} -")
    print(f"| {what} | {step} | {ratio} | {'; '.join(per)} |")
dp, conc = load("dp"), [load(f"concurrent_{g}") for g in range(n)]
if dp and all(conc):
    c = statistics.mean(r["local_step_ms"] for r in conc)
    print(f"dp step against the concurrent one-GPU jobs' mean ({c:.2f} ms): {c / dp['dp_step_ms']:.3f}")
PY
