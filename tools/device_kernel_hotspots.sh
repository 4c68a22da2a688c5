#!/usr/bin/env bash
# Run ON THE DEVICE from the repository root with carry ["build-carry"] (tools/build_carried.sh): where one
# launch of one kernel spends its time, instruction by instruction (Nsight Compute's SASS source page through
# tools/ncu_source_top.py: opcodes by executed instructions and stall samples, the hottest instructions and
# their stall reasons), for a `hybrid bench ops` case.
#   KERNEL=regex FILTER=bench-filter SHAPE=shape-substring [SKIP=launches to skip] [TOP=30] \
#     bash tools/device_kernel_hotspots.sh
# KERNEL matches the mangled name, so template arguments can pick an instantiation (e.g. ILb0ELb1E).
# The SASS page stays in $OUT/hotspots_sass.csv: its addresses match `nvdisasm -g` of a -lineinfo cubin of the same build.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
rep=/tmp/hybrid-carried/hotspots
ncu --kernel-name-base mangled -k "regex:$KERNEL" --launch-skip "${SKIP:-0}" --launch-count 1 \
  --section SourceCounters --section LaunchStats --section Occupancy -f -o "$rep" \
  "$h" bench ops --filter "$FILTER" --shape "$SHAPE" --reps 1 > "$OUT/hotspots_ncu.log" 2>&1
echo "ncu: rc $?"
ncu -i "$rep.ncu-rep" --page details > "$OUT/hotspots_details.txt" 2>&1
grep -E "Registers Per Thread|Local Memory|Achieved Occupancy|Duration|Block Limit" "$OUT/hotspots_details.txt"
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/hotspots_sass.csv"
python3 tools/ncu_source_top.py "$OUT/hotspots_sass.csv" "${TOP:-30}"
