#!/usr/bin/env bash
# Sandbox episode start and exec round trip, before and after a change, side
# by side in one run: builds `endless` at REV (default d2890db, the last
# commit before the sandbox was hardened) next to the current tree, then runs
# `endless bench sandbox` with each binary in turn, ROUNDS times, and prints
# the medians and the after/before ratios.
#
#   scripts/bench_sandbox_ab.sh [REV] [ROUNDS] [N]
#
# The first run builds REV's crate (dependencies are shared with target/).
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-d2890db}
ROUNDS=${2:-3}
N=${3:-100}
AB=target/ab
mkdir -p "$AB"
if [ ! -x "$AB/endless-$REV" ]; then
  rm -rf "$AB/src-$REV"
  git worktree add --detach -f "$AB/src-$REV" "$REV" >/dev/null
  cargo build --quiet --bin endless --manifest-path "$AB/src-$REV/Cargo.toml" --target-dir target
  cp target/debug/endless "$AB/endless-$REV"
  git worktree remove --force "$AB/src-$REV"
fi
cargo build --quiet --bin endless
cp target/debug/endless "$AB/endless-current"
for round in $(seq 1 "$ROUNDS"); do
  for which in "$REV" current; do
    XDG_CACHE_HOME="$AB/cache-$which" "$AB/endless-$which" bench sandbox --n "$N" --json \
      > "$AB/$which-$round.json"
  done
done
python3 - "$REV" "$ROUNDS" "$AB" <<'PY'
import json, statistics, sys
rev, rounds, ab = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def medians(which, key):
    out = []
    for r in range(1, rounds + 1):
        rep = json.load(open(f"{ab}/{which}-{r}.json"))
        local = next(b for b in rep["backends"] if b["backend"] == "local")
        out.append(local[key]["median_ms"])
    return out
for key, label in [("start", "episode start"), ("exec_true", "exec(true) round trip")]:
    before, after = medians(rev, key), medians("current", key)
    print(f"{label:24} before {statistics.median(before):8.3f} ms  after {statistics.median(after):8.3f} ms"
          f"  after/before {statistics.median(after) / statistics.median(before):.2f}x"
          f"  (per round: {', '.join(f'{a / b:.2f}' for a, b in zip(after, before))})")
PY
