#!/usr/bin/env bash
# Run ON THE DEVICE machine from the repository root: builds with CUDA for sm_90, runs every test
# executable (the [gpu] tests included, once more with HYBRID_CUDA_SYNC=1 and under compute-sanitizer),
# then any benchmarks, and writes logs and a summary under $OUT (default ./device-out), the table last.
# Needs .deps/root from tools/device_deps.sh (the image has no JSON, spdlog, fmt or Catch2 packages).
#   cd <repo> && bash tools/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
out=${OUT:-$repo/device-out}
build=$repo/build-device
deps=$repo/.deps/root/usr
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
row() { printf '%-34s %-8s %s\n' "$1" "$2" "$3" >> "$summary"; }

if [ ! -d "$deps/include" ]; then
  echo "device_check: $deps is missing: run tools/device_deps.sh on a machine with apt and carry .deps" >&2
  exit 2
fi
source tools/device_env.sh
jobs=$(nproc)

{
  echo "== date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  cmake --version 2>&1 | head -1
  echo "ninja $(ninja --version 2>&1)"
  g++ --version 2>&1 | head -1
  echo "nproc $jobs"
  echo "nccl: ${nccl_root:-not found}"
  ls "$nccl_root/lib" 2>/dev/null
} > "$out/system.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
row "device" "${gpu:+ok}" "${gpu:-no GPU visible}; nccl: ${nccl_root:-missing}"

t0=$(date +%s)
if cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYBRID_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
     > "$out/configure.log" 2>&1; then
  row "configure (CUDA ON, sm_90)" "ok" "$(( $(date +%s) - t0 )) s"
else
  row "configure (CUDA ON, sm_90)" "FAILED" "see configure.log"
  cat "$summary"
  exit 1
fi

# -k 0: one target that fails to link (a family without CUDA kernels yet) must not hide the others.
t0=$(date +%s)
ninja -C "$build" -j "$jobs" -k 0 > "$out/build.log" 2>&1
build_rc=$?
failed_targets=$(grep -E '^FAILED: ' "$out/build.log" | sed 's/^FAILED: //' | tr '\n' ' ')
row "build" "$([ $build_rc -eq 0 ] && echo ok || echo PARTIAL)" "$(( $(date +%s) - t0 )) s${failed_targets:+; failed: $failed_targets}"

# Every test executable CMake knows of, built or not.
tests=$(sed -n 's/^hybrid_test(\([a-z_]*\).*/\1/p' tests/CMakeLists.txt)
run_tests() {  # $1: label, $2: log, remaining: environment assignments
  local label=$1 log=$2
  shift 2
  : > "$log"
  for t in $tests; do
    local exe=$build/tests/$t
    if [ ! -x "$exe" ]; then
      row "$label $t" "NOTBUILT" "did not build (see build.log)"
      continue
    fi
    echo "===== $t" >> "$log"
    local t0=$(date +%s)
    env "$@" timeout 200 "$exe" >> "$log" 2>&1
    local rc=$?
    local tally=$(tail -n 3 "$log" | grep -E 'passed|failed|No tests ran' | tail -1)
    row "$label $t" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" "${tally:-rc $rc} ($(( $(date +%s) - t0 )) s)"
  done
}
run_tests "test" "$out/tests.log" OMP_NUM_THREADS=$jobs
# DEVICE_CHECK_QUICK=1 skips the synchronised rerun and memcheck (a re-check after small changes).
[ "${DEVICE_CHECK_QUICK:-0}" = 1 ] || run_tests "sync" "$out/tests_sync.log" OMP_NUM_THREADS=$jobs HYBRID_CUDA_SYNC=1

# compute-sanitizer's memcheck over the runtime's [gpu] tests: out-of-bounds and misaligned accesses.
if [ "${DEVICE_CHECK_QUICK:-0}" != 1 ] && command -v compute-sanitizer > /dev/null && [ -x "$build/tests/test_core" ]; then
  t0=$(date +%s)
  timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$build/tests/test_core" "[cuda]" \
    > "$out/memcheck.log" 2>&1
  rc=$?
  # Judged by the sanitizer's own count: a failing assertion is already reported in the test rows.
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$out/memcheck.log" | tail -1 | grep -oE '[0-9]+$')
  row "memcheck test_core [cuda]" "$([ "${errors:-x}" = 0 ] && echo ok || echo FAILED)" \
    "${errors:-no} memory errors; test exit $rc ($(( $(date +%s) - t0 )) s)"
fi

# Benchmarks: `hybrid bench` once it exists.
if [ -x "$build/hybrid" ] && "$build/hybrid" --help 2>/dev/null | grep -qE '^  bench '; then
  timeout 300 "$build/hybrid" bench ops --out "$out/bench.jsonl" > "$out/bench.log" 2>&1
  row "hybrid bench" "$([ $? -eq 0 ] && echo ok || echo FAILED)" "see bench.log"
  timeout 120 "$build/hybrid" bench decode --out "$out/bench.jsonl" >> "$out/bench.log" 2>&1
  row "hybrid bench decode" "$([ $? -eq 0 ] && echo ok || echo FAILED)" "nha vs attention step at 16k, end of bench.log"
else
  row "hybrid bench" "none" "no bench command registered yet"
fi

echo
echo "==================== device_check summary ===================="
cat "$summary"
