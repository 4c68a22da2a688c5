#!/usr/bin/env bash
# Run ON THE DEVICE from the repository root with binaries built on the development machine and
# carried, so a short verification spends no device time compiling. Build here first:
#   tools/build_carried.sh      # build-carry/: hybrid and test_layers for sm_90, packed, with spdlog/fmt
# then call the device with carry ["build-carry"] and `bash tools/device_carried.sh`.
# Runs the [gpu] layer tests of the families in GPU_TAGS, `hybrid bench ops` on BENCH_FILTER, the
# other [gpu] layer tests, `hybrid bench decode` and the PyTorch SDPA anchor, in that order (the
# newest kernels first, in case the device time runs out), each under its own timeout; logs under $OUT.
# NCU_CASES adds per-kernel times of chosen bench cases, CLOCKS_CASE the clocks and power around one,
# ANCHORS the Triton anchors, GAPS_FILTER a second timing with the launch latency counted, AB_ENV an A/B
# of a fused-path switch, SANITIZE_TAGS compute-sanitizer over some families' [gpu] tests (below).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$(pwd)/device-out}
carried=${CARRIED_BUILD:-build-carry}
build=/tmp/hybrid-carried/bin
mkdir -p "$out" /tmp/hybrid-carried
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$carried/bins.tar.xz" /tmp/hybrid-carried
export LD_LIBRARY_PATH=$(pwd)/$carried/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
source tools/device_env.sh
# cuBLAS and NCCL: the toolkit's, else the ones of PyTorch's wheels (nvidia/*/lib).
wheel_libs=$(python3 -c 'import glob, nvidia; print(":".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' 2>/dev/null)
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/cuda/lib64:/usr/local/cuda/lib${wheel_libs:+:$wheel_libs}
# The tests read golden files through the source path compiled in here; point it at this checkout.
src=$(cat "$carried/source_dir")
[ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -s "$(pwd)" "$src"; }
echo "built from $(head -1 "$carried/commit")$( [ "$(wc -l < "$carried/commit")" -gt 1 ] && echo ' (with uncommitted changes)')"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1
if ! "$build/hybrid" --help > /dev/null 2> /tmp/hybrid-carried/loader.log; then
  echo "device_carried: $build/hybrid does not start:"; cat /tmp/hybrid-carried/loader.log; exit 2
fi

# Per-kernel times under Nsight Compute, NCU_CASES="filter@shape;..." (e.g. "gated_delta_rule@ T16384 "):
# the case's warm-ups and one timed run (4 iterations), each launch replayed alone, clocks left alone.
# Slow: 1 to 3 minutes a case when the bench made every case's inputs (~15 GB); it now makes only the
# filtered family's, which should be faster under the profiler too (not yet timed).
# NCU_COUNT=N profiles only the first N launches and lists them in order; NCU_ONLY=1 runs nothing else;
# NCU_METRICS="dram__bytes_read.sum,dram__bytes_write.sum" adds byte counts per kernel (ncu_summary.py).
run_ncu() {
  local c csv
  IFS=';' read -ra ncu_cases <<< "${NCU_CASES:-}"
  for c in "${ncu_cases[@]}"; do
    csv=/tmp/hybrid-carried/ncu_$(printf '%s' "$c" | tr -c 'A-Za-z0-9' _).csv
    timeout "${NCU_TIMEOUT:-90}" ncu --clock-control none --profile-from-start off \
      --metrics gpu__time_duration.sum${NCU_METRICS:+,$NCU_METRICS} \
      ${NCU_COUNT:+--launch-count $NCU_COUNT} --csv "$build/hybrid" bench ops --filter "${c%%@*}" --shape "${c#*@}" \
      --reps 1 > "$csv" 2>&1
    echo "ncu $c: rc $?"
    if [ -n "${NCU_COUNT:-}" ]; then
      python3 tools/ncu_summary.py "$csv" 1 --list | tee -a "$out/ncu.log"
    else
      python3 tools/ncu_summary.py "$csv" 4 | head -25 | tee -a "$out/ncu.log"
    fi
  done
}
if [ "${NCU_ONLY:-0}" = 1 ]; then run_ncu; exit 0; fi

tests_log=$out/tests.log
: > "$tests_log"
run_tag() {  # $1: Catch2 test spec, $2: seconds
  [ -x "$build/test_layers" ] || return 0
  echo "===== $1" >> "$tests_log"
  local t0=$(date +%s)
  timeout "$2" "$build/test_layers" "$1" >> "$tests_log" 2>&1
  local rc=$?
  echo "tests $1: rc $rc in $(( $(date +%s) - t0 )) s: $(tail -n 3 "$tests_log" | grep -E 'passed|failed|No tests ran' | tail -1)"
}
first=""
for tag in ${GPU_TAGS:-nha gated_delta_rule gsa simple_gla}; do
  run_tag "[$tag][gpu]" "${TAG_TIMEOUT:-30}"
  first="$first~[$tag]"
done
timeout "${BENCH_TIMEOUT:-120}" "$build/hybrid" bench ops --reps "${BENCH_REPS:-7}" \
  --filter "${BENCH_FILTER:-gated_delta_rule,nha,gsa,simple_gla,mamba2_block}" > "$out/bench.log" 2>&1
echo "bench ops: rc $?"
# The same cases timed with the host's launch latency counted (--launch-gaps), GAPS_FILTER="name,...".
if [ -n "${GAPS_FILTER:-}" ]; then
  { echo "== with launch gaps"; timeout 90 "$build/hybrid" bench ops --reps "${BENCH_REPS:-7}" --launch-gaps \
      --filter "$GAPS_FILTER" | tail -n +4; } >> "$out/bench.log" 2>&1
  echo "bench ops --launch-gaps: rc $?"
fi
# The same cases with a switch set, AB_ENV="VAR=VALUE" AB_FILTER="name,...": a fused path's A/B; several
# settings separated by ';' run one after the other (AB_SHAPE: only the cases whose shape holds it).
IFS=';' read -ra ab_envs <<< "${AB_ENV:-}"
for ab in "${ab_envs[@]}"; do
  { echo "== with $ab"; env $ab timeout 90 "$build/hybrid" bench ops --reps "${BENCH_REPS:-7}" \
      --filter "${AB_FILTER:-}" ${AB_SHAPE:+--shape "$AB_SHAPE"} | tail -n +4; } >> "$out/bench.log" 2>&1
  echo "bench ops with $ab: rc $?"
done
run_ncu
# Clocks and power while one case runs alone CLOCKS_RUNS times, then with every case of its family
# before it: CLOCKS_CASE="filter@shape" (e.g. "attention_causal_fwd_bwd@ T8192 "), nvidia-smi sampled
# every 100 ms into $out/clocks.log beside the bench lines, to tell a slow run's clocks from its kernels.
if [ -n "${CLOCKS_CASE:-}" ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader -lms 100 > "$out/clocks_smi.csv" 2>&1 &
  smi=$!
  for i in $(seq "${CLOCKS_RUNS:-3}"); do
    echo "== alone, run $i, $(date +%T.%N)"
    timeout 60 "$build/hybrid" bench ops --reps 25 --filter "${CLOCKS_CASE%%@*}" --shape "${CLOCKS_CASE#*@}" | tail -1
  done >> "$out/clocks.log" 2>&1
  { echo "== with the family, $(date +%T.%N)"
    timeout 90 "$build/hybrid" bench ops --reps 25 --filter "${CLOCKS_CASE%%@*}" | tail -n +4
  } >> "$out/clocks.log" 2>&1
  kill "$smi"
  echo "clocks: $(wc -l < "$out/clocks_smi.csv") samples"
  cat "$out/clocks.log"
fi
run_tag "[gpu]$first" "${REST_TIMEOUT:-40}"
# compute-sanitizer's memcheck and racecheck over the [gpu] tests of the families in SANITIZE_TAGS
# (e.g. "nha gsa"): shared-memory layouts and barriers of changed kernels. Whole outputs in $out.
for tag in ${SANITIZE_TAGS:-}; do
  for tool in memcheck racecheck; do
    timeout "${SANITIZE_TIMEOUT:-200}" compute-sanitizer --tool "$tool" --error-exitcode 9 "$build/test_layers" \
      "[$tag][gpu]" > "$out/sanitize_${tag}_$tool.log" 2>&1
    echo "compute-sanitizer $tool [$tag][gpu]: rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
      "$out/sanitize_${tag}_$tool.log" | tail -1)"
  done
done
for t in "$build"/test_*; do  # the CARRIED_TESTS of build_carried.sh
  [ "$(basename "$t")" = test_layers ] && continue
  echo "===== $(basename "$t") [gpu]" >> "$tests_log"
  timeout "${REST_TIMEOUT:-40}" "$t" "[gpu]" >> "$tests_log" 2>&1
  echo "tests $(basename "$t") [gpu]: rc $?: $(tail -n 3 "$tests_log" | grep -E 'passed|failed|No tests ran' | tail -1)"
done
timeout 30 "$build/hybrid" bench decode >> "$out/bench.log" 2>&1
echo "bench decode: rc $?"
timeout "${SDPA_TIMEOUT:-45}" python3 tools/sdpa_anchor.py > "$out/sdpa.log" 2>&1
echo "sdpa anchor: rc $?"
# FLA / official-NHA anchors in the same call (carry .anchors too): ANCHORS="simple_gla,gated_delta_rule,..."
# (tools/linear_anchors.py --only), ANCHOR_T="1024,4096,16384".
if [ -n "${ANCHORS:-}" ]; then
  timeout "${ANCHOR_TIMEOUT:-300}" python3 tools/linear_anchors.py --only "$ANCHORS" --T "${ANCHOR_T:-1024,4096,16384}" \
    > "$out/anchors.log" 2>&1
  echo "linear anchors: rc $?"
fi
cat "$out/bench.log"
echo "== sdpa"; tail -14 "$out/sdpa.log"
[ -f "$out/anchors.log" ] && { echo "== anchors"; grep -v "^ *$" "$out/anchors.log" | tail -40; }
echo "== failures"; grep -B3 -A12 -E "FAILED|failed" "$tests_log" | head -80 || true
