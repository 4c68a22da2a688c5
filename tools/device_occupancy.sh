#!/usr/bin/env bash
# Run ON THE DEVICE from the repository root with carry ["build-carry"] (tools/build_carried.sh): what
# limits the residency of every kernel of one `hybrid bench ops` case, one line a kernel (Nsight
# Compute's launch statistics and occupancy: registers, shared memory per block, blocks an SM by
# registers, by shared memory and by warps, theoretical and achieved occupancy, duration). A kernel one
# block short of the next residency step by a few KiB of shared memory is where a smaller layout pays
# (gated_delta_rule's prepare: 75.8 -> 56 KiB, three -> four blocks an SM, 376 -> 297 us).
#   FILTER=bench-filter SHAPE=shape-substring [COUNT=launches (24)] bash tools/device_occupancy.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
rep=/tmp/hybrid-carried/occupancy
ncu --profile-from-start off --launch-count "${COUNT:-24}" --section LaunchStats --section Occupancy --section SpeedOfLight -f -o "$rep" \
  "$h" bench ops --filter "$FILTER" --shape "$SHAPE" --reps 1 > "$OUT/occupancy_ncu.log" 2>&1
echo "ncu: rc $?"
ncu -i "$rep.ncu-rep" --page details --csv > "$OUT/occupancy_details.csv" 2>&1
python3 - "$OUT/occupancy_details.csv" <<'EOF'
import csv
import sys

want = {'Registers Per Thread': 'regs', 'Dynamic Shared Memory Per Block': 'dyn smem',
        'Block Size': 'threads', 'Block Limit Registers': 'by regs', 'Block Limit Shared Mem': 'by smem',
        'Block Limit Warps': 'by warps', 'Theoretical Occupancy': 'theor %', 'Achieved Occupancy': 'achieved %',
        'Duration': 'duration'}
kernels = {}
with open(sys.argv[1], errors='replace') as f:
    rows = [r for r in csv.reader(line for line in f if line.startswith('"'))]
head = rows[0]
col = {name: head.index(name) for name in ('ID', 'Kernel Name', 'Metric Name', 'Metric Unit', 'Metric Value')}
for r in rows[1:]:
    key = (int(r[col['ID']]), r[col['Kernel Name']].split('(')[0][-60:])
    name = r[col['Metric Name']]
    if name in want:
        unit = r[col['Metric Unit']].replace('/block', '')
        kernels.setdefault(key, {})[want[name]] = r[col['Metric Value']] + (
            ' ' + unit if name in ('Duration', 'Dynamic Shared Memory Per Block') else '')
cols = list(want.values())
print('kernel'.ljust(62) + ''.join(c.rjust(13) for c in cols))
for (i, name), m in sorted(kernels.items()):
    print(f'{i:3d} {name:58s}' + ''.join(m.get(c, '-').rjust(13) for c in cols))
EOF
