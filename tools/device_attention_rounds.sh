#!/usr/bin/env bash
# On the device: causal attention fwd+bwd (`hybrid bench ops`) and PyTorch SDPA's default choice at the
# same shapes, in ROUNDS alternating rounds (ours, then SDPA, ROUNDS times), so that the drift of a call
# (the clocks under the power cap moved the 8k case by 3% to 9% between calls) falls on both sides; prints
# every round's times and ratios, then the median ratio per T. Binaries from tools/build_carried.sh:
#   run with carry ["build-carry"]: ROUNDS=3 bash tools/device_attention_rounds.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/device_carried_bins.sh
for r in $(seq "${ROUNDS:-3}"); do
  timeout 120 "$h" bench ops --reps "${BENCH_REPS:-10}" --filter attention_causal_fwd_bwd > "$OUT/ours_$r.log" 2>&1
  echo "round $r ours: rc $?"
  timeout 120 python3 tools/sdpa_anchor.py --default-only > "$OUT/sdpa_$r.log" 2>&1
  echo "round $r sdpa: rc $?"
done
python3 - "$OUT" "${ROUNDS:-3}" <<'PY'
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ratios = {}
for r in range(1, rounds + 1):
    ours = {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"attention_causal_fwd_bwd\s+B\d+ T(\d+) \S+ \S+ \S+\s+([\d.]+)", open(f"{out}/ours_{r}.log").read())}
    sdpa = {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^default\s+(\d+)\s+[\d.]+\s+([\d.]+)", open(f"{out}/sdpa_{r}.log").read(), re.M)}
    for T in sorted(ours):
        if T in sdpa:
            ratios.setdefault(T, []).append(ours[T] / sdpa[T])
            print(f"round {r} T {T:>5}: ours {ours[T]:.3f} ms, sdpa {sdpa[T]:.3f} ms, ratio {ours[T] / sdpa[T]:.3f}")
for T, x in sorted(ratios.items()):
    print(f"T {T:>5}: median ratio {statistics.median(x):.3f} over {len(x)} rounds (min {min(x):.3f}, max {max(x):.3f})")
PY
