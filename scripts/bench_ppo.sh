#!/usr/bin/env bash
# PPO update throughput: the candle trainer (`endless bench ppo`, release
# build) against the same model, batch and loss in PyTorch on the CPU
# (scripts/bench_torch_ppo.py), for the ~1M and ~10M parameter models.
#
# PyTorch is installed from PyPI into target/torch-venv for this script only;
# the project itself does not depend on Python. Both sides use 2 threads.
#
# Usage: scripts/bench_ppo.sh [STEPS] (timed steps per run, default 5)
# Env: ENDLESS_BIN (an endless binary; default: cargo build --release),
#      TORCH_VENV (default target/torch-venv), SIZES (default "1m 10m"),
#      THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-5}
WARMUP=${WARMUP:-2}
SIZES=${SIZES:-"1m 10m"}
THREADS=${THREADS:-2}
VENV=${TORCH_VENV:-target/torch-venv}
OUT=target/bench-ppo

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import torch, safetensors' 2>/dev/null; then
    echo "installing torch from PyPI into $VENV (large download, once)" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >&2
    "$VENV/bin/pip" install -q torch safetensors numpy >&2
fi

if [ -z "${ENDLESS_BIN:-}" ]; then
    cargo build --release --quiet
    ENDLESS_BIN=target/release/endless
fi

export RAYON_NUM_THREADS=$THREADS
rows=()
for size in $SIZES; do
    dir="$OUT/$size"
    rm -rf "$dir"
    echo "== $size: candle" >&2
    "$ENDLESS_BIN" bench ppo --size "$size" --n "$STEPS" --warmup "$WARMUP" --dump "$dir" >&2
    echo "== $size: torch" >&2
    "$VENV/bin/python" scripts/bench_torch_ppo.py "$dir" --steps "$STEPS" --warmup "$WARMUP" \
        --threads "$THREADS" >&2
    rows+=("$("$VENV/bin/python" - "$dir" <<'EOF'
import json, sys, os
d = sys.argv[1]
c = json.load(open(os.path.join(d, "candle.json")))
t = json.load(open(os.path.join(d, "torch.json")))
print(
    f"{c['size']:>5} {c['params']:>10} {c['tokens_per_s']:>14.0f} {t['tokens_per_s']:>14.0f} "
    f"{c['tokens_per_s'] / t['tokens_per_s']:>8.2f}x "
    f"{c['tokens_per_s_best'] / t['tokens_per_s_best']:>8.2f}x {c['seconds_per_step']:>9.3f} "
    f"{t['seconds_per_step']:>9.3f} {t['first_loss_abs_diff']:>11.1e}"
)
EOF
)")
done

printf '\nPPO update on CPU, batch 8 x 256 tokens, %s threads, %s timed steps after %s warmup (torch %s)\n' \
    "$THREADS" "$STEPS" "$WARMUP" "$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
printf '%5s %10s %14s %14s %9s %9s %9s %9s %11s\n' size params "candle tok/s" "torch tok/s" ratio "best/best" "candle s" "torch s" "loss |diff|"
for r in "${rows[@]}"; do
    echo "$r"
done
echo "(ratio: mean step times; best/best: fastest steps, less sensitive to other load on the machine)"
echo "(goal: candle >= 1.0x torch; results in $OUT/<size>/{candle,torch}.json)"
