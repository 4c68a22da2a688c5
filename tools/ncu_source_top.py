"""Where one kernel's time goes, instruction by instruction, from Nsight Compute's SASS source page: the
opcodes by executed instructions and by warp stall samples, the stall reasons, then the hottest instructions with their main
stall reasons. Take the report on the device (a -lineinfo build, one launch):
  ncu -k regex:NAME --launch-skip S --launch-count 1 --section SourceCounters -o /tmp/k $h bench ops ...
  ncu -i /tmp/k.ncu-rep --page source --csv --print-source sass > $OUT/k_sass.csv
  python3 tools/ncu_source_top.py $OUT/k_sass.csv [N]
(2026-11-28: this is how the gsa backward's prologue loads were found to hold a fifth of its stalls.)
"""
import csv
import sys
from collections import Counter

INST, STALL = 'Instructions Executed', 'Warp Stall Sampling (All Samples)'


def number(text):
    try:
        return float(text.replace(',', ''))
    except (AttributeError, ValueError):
        return 0.0


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
    with open(path, errors='replace') as f:
        lines = [line for line in f.read().splitlines() if line.startswith('"')]
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        sys.exit(f'ncu_source_top: no SASS source table in {path} (take it with --print-source sass)')
    rows = list(csv.DictReader(lines[start:]))
    reasons = [k for k in rows[0] if k.startswith('stall_') and not k.endswith('(Not Issued)')]
    inst_total = sum(number(r[INST]) for r in rows) or 1.0
    stall_total = sum(number(r[STALL]) for r in rows) or 1.0
    print(f'{len(rows)} instructions in the kernel, {inst_total:.4g} executed (warp level), {stall_total:.4g} stall samples')
    by_inst, by_stall = Counter(), Counter()
    for r in rows:
        words = r['Source'].split()
        if not words:
            continue
        op = (words[1] if words[0].startswith('@') and len(words) > 1 else words[0]).split('.')[0]
        by_inst[op] += number(r[INST])
        by_stall[op] += number(r[STALL])
    print('== opcodes: % of executed instructions, % of stall samples')
    for op, n in by_inst.most_common(top):
        print(f'{op:12s} {100 * n / inst_total:5.1f}%  {100 * by_stall[op] / stall_total:5.1f}%')
    print('== stall reasons: % of stall samples')
    by_reason = Counter({k[6:]: sum(number(r[k]) for r in rows) for k in reasons})
    for k, n in by_reason.most_common(12):
        print(f'{k:24s} {100 * n / stall_total:5.1f}%')
    print(f'== the {top} instructions with the most stall samples (index in the kernel, % of samples, main reasons)')
    hot = sorted(range(len(rows)), key=lambda i: -number(rows[i][STALL]))[:top]
    for i in sorted(hot):
        r = rows[i]
        main_reasons = sorted(reasons, key=lambda k: -number(r[k]))[:2]
        why = ', '.join(f'{k[6:]} {number(r[k]) / (number(r[STALL]) or 1):.0%}' for k in main_reasons if number(r[k]) > 0)
        print(f'{i:6d} {100 * number(r[STALL]) / stall_total:5.1f}%  {r["Source"].strip()[:60]:60s}  {why}')


if __name__ == '__main__':
    main()
