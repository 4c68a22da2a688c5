"""Sums Nsight Compute's per-launch kernel durations (ncu --csv --metrics gpu__time_duration.sum) by kernel
name and prints each kernel's time per iteration, the largest first. Byte metrics in the same CSV
(e.g. dram__bytes_read.sum, dram__bytes_write.sum: NCU_METRICS in tools/device_carried.sh) are summed
the same way and printed in MB per iteration after the time.
Usage: python3 tools/ncu_summary.py NCU.csv ITERATIONS [--list]   (bench ops runs a case 3 + --reps times;
--list prints every launch in order instead, for a run cut by ncu --launch-count)
"""
import csv
import sys
from collections import defaultdict

SCALE_TO_MB = {'byte': 1e-6, 'Kbyte': 1e-3, 'Mbyte': 1.0, 'Gbyte': 1e3, 'Tbyte': 1e6}
SCALE_TO_US = {'nsecond': 1e-3, 'ns': 1e-3, 'usecond': 1.0, 'us': 1.0, 'msecond': 1e3, 'ms': 1e3, 'second': 1e6, 's': 1e6}


def main():
    path, iterations = sys.argv[1], int(sys.argv[2])
    with open(path, errors='replace') as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') and 'Metric Value' in line), None)
    if start is None:
        sys.exit(f'ncu_summary: no ncu CSV table in {path}')
    total, count = defaultdict(float), defaultdict(int)
    mbytes = defaultdict(lambda: defaultdict(float))  # metric -> kernel -> MB
    for row in csv.DictReader(l for l in lines[start:] if l.startswith('"')):
        if row.get('Metric Unit') in SCALE_TO_MB:
            mb = float(row['Metric Value'].replace(',', '')) * SCALE_TO_MB[row['Metric Unit']]
            mbytes[row['Metric Name']][row['Kernel Name']] += mb
            continue
        if row.get('Metric Name') != 'gpu__time_duration.sum':
            continue
        us = float(row['Metric Value'].replace(',', '')) * SCALE_TO_US[row['Metric Unit']]
        if '--list' in sys.argv:
            print(f'{us:10.1f} us  {row["Grid Size"]:>16}  {row["Kernel Name"][:100]}')
        total[row['Kernel Name']] += us
        count[row['Kernel Name']] += 1
    whole = sum(total.values()) / iterations
    print(f'{path}: {whole:.1f} us of kernel time per iteration ({iterations} iterations)')
    for name in sorted(total, key=total.get, reverse=True):
        per = total[name] / iterations
        extra = ''.join(f'  {m.split("__")[-1]} {mbytes[m][name] / iterations:.1f} MB' for m in sorted(mbytes))
        print(f'  {per:9.1f} us {100 * per / whole:5.1f}%  x{count[name] / iterations:g}{extra}  {name[:110]}')


if __name__ == '__main__':
    main()
