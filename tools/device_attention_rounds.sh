#!/usr/bin/env bash
# On the device: one `hybrid bench ops` case (CASE, default causal attention fwd+bwd; e.g. nha_fwd_bwd)
# and PyTorch SDPA's default causal attention at the same T, in ROUNDS alternating rounds (ours, then
# SDPA, ROUNDS times), so that the drift of a call (the clocks under the power cap moved the 8k attention
# case by 3% to 9% between calls) falls on both sides; prints every round's times and ratios, then the
# median ratio per T. Binaries from tools/build_carried.sh:
#   run with carry ["build-carry"]: ROUNDS=3 CASE=attention_causal_fwd_bwd bash tools/device_attention_rounds.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
for r in $(seq "${ROUNDS:-3}"); do
  timeout 120 "$h" bench ops --reps "${BENCH_REPS:-10}" --filter "${CASE:-attention_causal_fwd_bwd}" > "$OUT/ours_$r.log" 2>&1
  echo "round $r ours: rc $?"
  timeout 120 python3 tools/sdpa_anchor.py --default-only > "$OUT/sdpa_$r.log" 2>&1
  echo "round $r sdpa: rc $?"
done
python3 - "$OUT" "${ROUNDS:-3}" "${CASE:-attention_causal_fwd_bwd}" <<'PY'
import re, statistics, sys
out, rounds, case = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ratios = {}
for r in range(1, rounds + 1):
    ours = {}
    for line in open(f"{out}/ours_{r}.log"):  # name, shape, ms, ...: columns two or more spaces apart
        cols = re.split(r"\s{2,}", line.strip())
        m = re.search(r"\bT(\d+)\b", cols[1]) if len(cols) > 2 and cols[0] == case else None
        if m:
            ours[int(m.group(1))] = float(cols[2])
    sdpa = {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^default\s+(\d+)\s+[\d.]+\s+([\d.]+)", open(f"{out}/sdpa_{r}.log").read(), re.M)}
    for T in sorted(ours):
        if T in sdpa:
            ratios.setdefault(T, []).append(ours[T] / sdpa[T])
            print(f"round {r} T {T:>5}: ours {ours[T]:.3f} ms, sdpa {sdpa[T]:.3f} ms, ratio {ours[T] / sdpa[T]:.3f}")
for T, x in sorted(ratios.items()):
    print(f"T {T:>5}: median ratio {statistics.median(x):.3f} over {len(x)} rounds (min {min(x):.3f}, max {max(x):.3f})")
PY
