"""The CUDA source lines of one profiled kernel with the most executed instructions and the most warp stall
samples, from Nsight Compute's source page (a report taken with --section SourceCounters --import-source yes
and a -lineinfo build):
  ncu -i REPORT.ncu-rep --page source --csv --print-source cuda > SRC.csv
  python3 tools/ncu_source_top.py SRC.csv [N]
"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(',', ''))
    except ValueError:
        return 0.0


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with open(path, errors='replace') as f:
        lines = [line for line in f.read().splitlines() if line.startswith('"')]
    rows = list(csv.DictReader(lines))
    if not rows:
        sys.exit(f'ncu_source_top: no source table in {path}')
    keys = list(rows[0].keys())
    inst = next((k for k in keys if k.startswith('Instructions Executed')), None)
    stall = next((k for k in keys if k.startswith('Warp Stall Sampling (All')), None)
    src = next((k for k in keys if k in ('Source', 'Address')), keys[1])
    line = next((k for k in keys if k in ('#', 'Line')), keys[0])
    print(f'columns: {line!r} {src!r} {inst!r} {stall!r}')
    for key in (inst, stall):
        if key is None:
            continue
        total = sum(number(r[key]) for r in rows) or 1.0
        print(f'== top {top} by {key} (total {total:.3g})')
        for r in sorted(rows, key=lambda r: -number(r[key]))[:top]:
            print(f'{100 * number(r[key]) / total:6.2f}%  {r[line]:>6}  {r[src].strip()[:110]}')


if __name__ == '__main__':
    main()
