#!/usr/bin/env bash
# Run ON THE DEVICE, kind nvidia-h200-x2 (2 GPUs), from the repository root, carrying build-carry (or .deps):
#   1. runs the carried hybrid, else builds it with CUDA and NCCL (PyTorch's wheel, tools/device_env.sh);
#   2. equality on GPUs in fp32: 1 GPU with batch 16 vs 2 ranks with 8 each, plain and ZeRO-1
#      (small buckets), and the ZeRO-1 checkpoint of 2 ranks resumed on 1 GPU;
#   3. a two-"node" run on this host (two `hybrid launch --nnodes 2` invocations, one GPU each,
#      rendezvous over loopback), compared with the one-launcher run;
#   4. killing a rank: under one launcher (the launcher tears the group down) and across two
#      launchers (the survivor's NCCL wait times out, HYBRID_COMM_TIMEOUT=30), with the time taken;
#   5. `hybrid bench dp` on a GPT-2-124M-shaped model: 1 GPU, then 2 GPUs at the same per-GPU batch.
# Everything lands in $OUT (summary.txt first). NCCL_NVLS_ENABLE=0 for every rank (device_env.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$(pwd)/device-out}
mkdir -p "$OUT"
source tools/device_env.sh
export LD_LIBRARY_PATH="$HYBRID_NCCL_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
summary=$OUT/summary.txt
: > "$summary"
row() { printf '%-44s %s\n' "$1" "$2" | tee -a "$summary"; }
nvidia-smi --query-gpu=index,name,memory.total --format=csv > "$OUT/gpus.txt" 2>&1
row "gpus" "$(nvidia-smi -L 2>/dev/null | wc -l); NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; nccl $HYBRID_NCCL_ROOT"

# With build-carry/ carried (tools/build_carried.sh, linked against libnccl.so.2), the binary built on the
# development machine runs against the wheel's NCCL and no device time goes on compiling.
if [ -f build-carry/bins.tar.xz ]; then
  mkdir -p /tmp/hybrid-carried
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' build-carry/bins.tar.xz /tmp/hybrid-carried
  export LD_LIBRARY_PATH="$(pwd)/build-carry/lib:$LD_LIBRARY_PATH"
  wheel_libs=$(python3 -c 'import glob, nvidia; print(":".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' 2>/dev/null)
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/cuda/lib64${wheel_libs:+:$wheel_libs}
  h=/tmp/hybrid-carried/bin/hybrid
  $h --help > /dev/null 2> "$OUT/loader.log"; rc=$?
  row "carried hybrid" "rc $rc, built from $(head -1 build-carry/commit)"
  [ $rc -eq 0 ] || { cat "$OUT/loader.log"; exit 1; }
else
  t0=$(date +%s)
  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYBRID_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DHYBRID_TESTS=OFF > "$OUT/configure.log" 2>&1 && ninja -C build-device hybrid > "$OUT/build.log" 2>&1
  rc=$?
  row "build hybrid (CUDA, NCCL)" "rc $rc in $(( $(date +%s) - t0 )) s; $(grep -o 'NCCL ON[^ ]*' "$OUT/configure.log" | head -1)"
  [ $rc -eq 0 ] || { tail -30 "$OUT/build.log"; exit 1; }
  h=$(pwd)/build-device/hybrid
fi
$h tokenize --preset tinyshakespeare --tokenizer gpt2 --out data/ts > "$OUT/tokenize.log" 2>&1

# 2. Equality (fp32 so that only the reduction order differs).
eq=(--config configs/quickstart.json --set train.steps=20 --set train.precision='"fp32"' --set train.eval_interval=10
    --set train.checkpoint_interval=10 --set train.log_interval=1 --set eval.max_windows=16
    --set train.schedule.warmup_steps=5)
$h train "${eq[@]}" --set train.out_dir='"runs/eq1"' > "$OUT/eq1.log" 2>&1; row "eq: 1 GPU batch 16" "rc $?"
$h launch --nproc-per-node 2 -- train "${eq[@]}" --set train.out_dir='"runs/eq2"' > "$OUT/eq2.log" 2>&1
row "eq: 2 ranks x 8" "rc $?"
$h launch --nproc-per-node 2 -- train "${eq[@]}" --set train.out_dir='"runs/eq2z"' --set train.data_parallel.zero1=true \
  --set train.data_parallel.bucket_mb=0.25 > "$OUT/eq2z.log" 2>&1
row "eq: 2 ranks x 8, ZeRO-1, 0.25 MiB buckets" "rc $?"
$h train --resume runs/eq2z/ckpt/step_0000010 --set train.out_dir='"runs/eq2z_on1"' > "$OUT/eq2z_on1.log" 2>&1
row "eq: ZeRO-1 step 10 resumed on 1 GPU" "rc $?"

# 3. Two "nodes" on this host, one GPU each.
nodes=(--config configs/quickstart.json --set train.steps=20 --set train.precision='"fp32"' --set train.eval_interval=10
       --set train.checkpoint_interval=10 --set train.log_interval=1 --set eval.max_windows=16
       --set train.schedule.warmup_steps=5 --set train.out_dir='"runs/nodes"')
CUDA_VISIBLE_DEVICES=0 $h launch --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-port 29611 -- train "${nodes[@]}" > "$OUT/node0.log" 2>&1 &
p0=$!
CUDA_VISIBLE_DEVICES=1 $h launch --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-port 29611 -- train "${nodes[@]}" > "$OUT/node1.log" 2>&1 &
p1=$!
wait $p0; r0=$?; wait $p1; r1=$?
row "two nodes (loopback rendezvous)" "node0 rc $r0, node1 rc $r1"

python3 - "$OUT" <<'PY' | tee -a "$summary"
import json, sys
def recs(run, kind, field):
    out = []
    for line in open(f"runs/{run}/metrics.jsonl"):
        j = json.loads(line)
        if j["kind"] == kind: out.append(j[field])
    return out
def rel(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
ref = {k: recs("eq1", *k) for k in [("train", "loss"), ("train", "grad_norm"), ("ppl", "loss")]}
for run in ["eq2", "eq2z", "nodes"]:
    try:
        errs = ", ".join(f"{k[0]}.{k[1]} {rel(recs(run, *k), v):.2e}" for k, v in ref.items())
    except FileNotFoundError as e:
        errs = f"missing {e.filename}"
    print(f"{'max rel diff vs 1 GPU: ' + run:<44} {errs}")
try:
    a, b = recs("eq2z", "train", "loss")[10:], recs("eq2z_on1", "train", "loss")
    print(f"{'ZeRO-1 resumed on 1 GPU vs 2 ranks':<44} steps 11-20 loss max rel diff {rel(b, a):.2e}")
except FileNotFoundError as e:
    print(f"{'ZeRO-1 resumed on 1 GPU vs 2 ranks':<44} missing {e.filename}")
PY

# 4. Killing a rank.
long=(--config configs/quickstart.json --set train.steps=100000 --set train.eval_interval=0 --set train.checkpoint_interval=0
      --set train.log_interval=10)
$h launch --nproc-per-node 2 -- train "${long[@]}" --set train.out_dir='"runs/kill1"' > "$OUT/kill_one_launcher.log" 2>&1 &
lp=$!
sleep 20
victim=$(pgrep -f 'runs/kill1' | while read p; do [ "$p" != "$lp" ] && grep -qz '^LOCAL_RANK=1$' /proc/$p/environ 2>/dev/null && echo $p; done | head -1)
t0=$(date +%s.%N)
kill -9 "$victim"
wait $lp; lrc=$?
row "kill rank 1 under one launcher" "launcher rc $lrc after $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s"
HYBRID_COMM_TIMEOUT=30 CUDA_VISIBLE_DEVICES=0 $h launch --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-port 29612 -- train "${long[@]}" --set train.out_dir='"runs/kill2"' > "$OUT/kill_node0.log" 2>&1 &
n0=$!
HYBRID_COMM_TIMEOUT=30 CUDA_VISIBLE_DEVICES=1 $h launch --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-port 29612 -- train "${long[@]}" --set train.out_dir='"runs/kill2"' > "$OUT/kill_node1.log" 2>&1 &
n1=$!
sleep 20
t0=$(date +%s.%N)
kill -9 $n1 $(pgrep -P $n1)
wait $n0; nrc=$?
row "kill node 1 (two launchers, timeout 30 s)" "node 0 rc $nrc after $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s: $(grep -h 'data parallel:' "$OUT/kill_node0.log" | head -1 | cut -c1-160)"

# 5. Benchmark, GPT-2-124M shape, 16 x 1024 tokens per GPU, bf16.
$h bench dp --config configs/gpt2_124m.json --set train.batch_size=16 --steps 20 --out "$OUT/bench_dp_1gpu.json" > "$OUT/bench_dp_1gpu.log" 2>&1
row "bench dp 1 GPU" "$(tail -1 "$OUT/bench_dp_1gpu.log" | cut -c1-300)"
for mb in 25 100; do
  $h launch --nproc-per-node 2 -- bench dp --config configs/gpt2_124m.json --set train.batch_size=32 \
    --set train.data_parallel.bucket_mb=$mb --steps 20 --out "$OUT/bench_dp_2gpu_${mb}mb.json" > "$OUT/bench_dp_2gpu_${mb}mb.log" 2>&1
  row "bench dp 2 GPUs, bucket $mb MiB" "$(tail -1 "$OUT/bench_dp_2gpu_${mb}mb.log" | cut -c1-400)"
done
python3 - "$OUT" <<'PY' | tee -a "$summary"
import json, sys, glob
out = sys.argv[1]
one = json.load(open(f"{out}/bench_dp_1gpu.json"))
for f in sorted(glob.glob(f"{out}/bench_dp_2gpu_*.json")):
    two = json.load(open(f))
    eff = two["dp_tokens_per_s_per_gpu"] / one["local_tokens_per_s_per_gpu"]
    print(f"{f.split('/')[-1]:<44} weak-scaling efficiency {eff:.3f}; tok/s/GPU 1 GPU {one['local_tokens_per_s_per_gpu']:.0f}, "
          f"2 GPUs {two['dp_tokens_per_s_per_gpu']:.0f}; comm alone {two['comm_only_ms']:.2f} ms, hidden {two['hidden_fraction']:.2f}")
PY
(cd "$OUT" && tar czf logs.tar.gz *.log && rm -f *.log)
echo "== summary"; cat "$summary"
