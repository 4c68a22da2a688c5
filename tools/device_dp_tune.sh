#!/usr/bin/env bash
# Run ON THE DEVICE, kind nvidia-h200-x2, carrying build-carry (tools/build_carried.sh): `hybrid bench dp`
# on the GPT-2-124M shape, 1 GPU and then 2 GPUs once per setting in DP_ENVS (";"-separated lists of
# VAR=VALUE, "-" for none), with the phase split of each step, to find where the data-parallel step
# loses time against one GPU. Results: $OUT/dp_tune.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$(pwd)/device-out}
mkdir -p "$OUT" /tmp/hybrid-carried
source tools/device_env.sh
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' build-carry/bins.tar.xz /tmp/hybrid-carried
wheel_libs=$(python3 -c 'import glob, nvidia; print(":".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' 2>/dev/null)
export LD_LIBRARY_PATH="$(pwd)/build-carry/lib:$LD_LIBRARY_PATH:/usr/local/cuda/lib64${wheel_libs:+:$wheel_libs}"
h=/tmp/hybrid-carried/bin/hybrid
[ -f data/ts/ts.train.bin ] || $h tokenize --preset tinyshakespeare --tokenizer gpt2 --out data/ts > /dev/null
log=$OUT/dp_tune.txt
steps=${DP_STEPS:-20}
{ echo "built from $(head -1 build-carry/commit)"; echo "== 1 GPU";
  $h bench dp --config configs/gpt2_124m.json --set train.batch_size=16 --steps "$steps" 2>&1 | tail -1; } >> "$log"
IFS=';' read -ra settings <<< "${DP_ENVS:--}"
for e in "${settings[@]}"; do
  vars=(); [ "$e" != "-" ] && read -ra vars <<< "$e"
  echo "== 2 GPUs, ${e} ${DP_SETS:-}" >> "$log"
  env "${vars[@]}" timeout 120 $h launch --nproc-per-node 2 -- bench dp --config configs/gpt2_124m.json \
    --set train.batch_size=32 ${DP_SETS:-} --steps "$steps" 2>&1 | tail -1 >> "$log"
done
cat "$log"
