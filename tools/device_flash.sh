#!/usr/bin/env bash
# On the device: the wgmma layout probe, then the flash-attention harness (validation against the
# naive reference, then timing) and PyTorch SDPA at the same shapes, in one call. Binaries come
# prebuilt in build-dev/ (tools/build_flash_dev.sh on the development machine: nvcc needs ~3 minutes
# for the harness, device time better spent running it) or are built here when absent.
#   run: carry ["build-dev"], command: bash tools/device_flash.sh   (FLASH_ARGS=--validate, SANITIZE=1)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/flash_out}
mkdir -p "$out"
if [ ! -x build-dev/flash_dev ] || [ ! -x build-dev/wgmma_probe ]; then
  bash tools/build_flash_dev.sh || exit 1
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee "$out/gpu.txt"
echo "== wgmma probe"
build-dev/wgmma_probe 2>&1 | tee "$out/probe.txt"
if [ "${SANITIZE:-0}" = 1 ]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool (--quick)"
    compute-sanitizer --tool "$tool" --print-limit 5 build-dev/flash_dev --quick > "$out/sanitize_$tool.txt" 2>&1
    tail -8 "$out/sanitize_$tool.txt"
  done
fi
# NCU=regex: Nsight Compute on the first launch of each matching kernel in `flash_dev --profile`
# (T = 4096, B = 8): speed of light, scheduler and warp states, then the hottest SASS.
if [ -n "${NCU:-}" ]; then
  IFS=';' read -ra kernels <<< "$NCU"
  for k in "${kernels[@]}"; do
    rep=/tmp/flash_ncu
    ncu --kernel-name-base mangled -k "regex:$k" --launch-count 1 --section SpeedOfLight --section SchedulerStats \
      --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --section SourceCounters -f -o "$rep" build-dev/flash_dev --profile > "$out/ncu.log" 2>&1
    echo "== ncu $k: rc $?"
    ncu -i "$rep.ncu-rep" --page details > "$out/ncu_details_$k.txt" 2>&1
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Block Limit" "$out/ncu_details_$k.txt"
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > /tmp/flash_sass.csv
    python3 tools/ncu_source_top.py /tmp/flash_sass.csv "${TOP:-25}" > "$out/ncu_top_$k.txt"
    gzip -c /tmp/flash_sass.csv > "$out/ncu_sass_$k.csv.gz"
    head -60 "$out/ncu_top_$k.txt"
  done
fi
echo "== flash_dev ${FLASH_ARGS:-}"
build-dev/flash_dev ${FLASH_ARGS:-} > "$out/flash_dev.txt" 2>&1
echo "flash_dev rc $?"
grep -v '^ok ' "$out/flash_dev.txt"
if [ "${SDPA:-1}" = 1 ]; then
  echo "== SDPA"
  python3 tools/sdpa_anchor.py 2>&1 | tee "$out/sdpa.txt"
fi
