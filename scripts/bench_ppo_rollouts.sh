#!/usr/bin/env bash
# PPO throughput of a `tiny` policy with one setting beside another, in one
# run: a short warm start on oracle trajectories, then PPO from that same
# checkpoint for MINUTES with each setting in turn (ROUNDS times,
# alternating), on the same tasks and recipe as scripts/replicate.sh.
# Prints, per run, PPO updates, draws of 16 episodes, episodes per minute,
# peak resident memory and CPU split, and the ratio of the means.
#
#   scripts/bench_ppo_rollouts.sh                  # glibc's malloc vs mimalloc
#   COMPARE=kv-cache scripts/bench_ppo_rollouts.sh # KV cache grown every step vs preallocated
#   COMPARE=decode-kernels scripts/bench_ppo_rollouts.sh # candle's ops vs the decoding kernels
#   MINUTES=2 ROUNDS=2 scripts/bench_ppo_rollouts.sh
#
# The warm start takes about 5 minutes on 2 cores; the workspace
# (target/bench-alloc) is reused by later runs. Episodes per minute is the
# steady figure: updates come only from groups with mixed rewards, and this
# short warm start passes few episodes, so a few minutes make few of them.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-4}
ROUNDS=${ROUNDS:-1}
COMPARE=${COMPARE:-allocator}
# Each side: a label and the environment its runs get (the second is the default build's).
case "$COMPARE" in
    allocator) A=(glibc ENDLESS_ALLOCATOR=system) B=(mimalloc ENDLESS_ALLOCATOR=mimalloc) ;;
    kv-cache) A=(kv-grown ENDLESS_KV_RESERVE=1) B=(kv-prealloc ENDLESS_KV_RESERVE=256) ;;
    decode-kernels) A=(candle-ops ENDLESS_DECODE_KERNELS=0) B=(kernels ENDLESS_DECODE_KERNELS=1) ;;
    *) echo "COMPARE must be allocator, kv-cache or decode-kernels, not $COMPARE" >&2; exit 2 ;;
esac
WS=${WS:-target/bench-alloc}
FAMILIES=fix-permissions,cleanup-temp-files,extract-archive-subset,find-replace-config,dedupe-lines,todo-extract,zip-and-xz-bundle,bashrc-environment
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 2; }

cargo build --release --quiet
E=target/release/endless
WARM=$WS/checkpoints/warm
if [ ! -d "$WARM/step-00000000" ]; then
    mkdir -p "$WS"
    "$E" --workspace "$WS" generate --offline --families "$FAMILIES" --split train \
        --count 900 --seed 1 >/dev/null
    ls "$WS/tasks" | grep -E -- '[0-8]-c[12]$' | sort > "$WS/easy.txt"
    head -n 200 "$WS/easy.txt" > "$WS/sft-tasks.txt"
    tail -n +201 "$WS/easy.txt" > "$WS/ppo-tasks.txt"
    "$E" --workspace "$WS" train --init tiny --sft --sft-steps 300 \
        --sft-tasks "$(paste -sd, "$WS/sft-tasks.txt")" \
        --tasks "$(paste -sd, "$WS/ppo-tasks.txt")" --steps 0 --seed 1 \
        --out "$WARM" >/dev/null
fi

run() { # label, environment, run name
    local log="$WS/$3.log"
    rm -rf "$WS/checkpoints/$3"
    env "$2" /usr/bin/time -v "$E" --workspace "$WS" train \
        --init "$WARM/step-00000000" \
        --tasks "$(paste -sd, "$WS/ppo-tasks.txt")" \
        --steps 100000 --minutes "$MINUTES" \
        --samples 16 --tasks-per-step 1 --max-turns 4 --max-tokens 160 \
        --temperature 0.7 --reward clean --lr 1e-4 --minibatch 4 --concurrency 16 \
        --checkpoint-every 100000 --seed 1 --dynamic-sampling \
        --critic shared --ppo-epochs 1 --value-clip 0 --weight-decay 0 \
        --normalize-reward=false --out "$WS/checkpoints/$3" >"$log" 2>&1
    local updates draws eps rss user sys
    updates=$(grep -cE '^step +[0-9]+/[0-9]+ +reward' "$log" || true)
    # Every group of 16 episodes sampled, kept or dropped by dynamic sampling.
    draws=$(grep -oE '^step [0-9]+: [0-9]+ of [0-9]+ drawn' "$log" \
        | awk '{s += $5} END {print s + 0}')
    eps=$((draws * 16))
    rss=$(awk -F': ' '/Maximum resident/ {printf "%.2f", $2 / 1048576}' "$log")
    user=$(awk -F': ' '/User time/ {print $2}' "$log")
    sys=$(awk -F': ' '/System time/ {print $2}' "$log")
    printf '%-11s %8s %6s %12s %10s %8s %8s\n' "$1" "$updates" "$draws" \
        "$(awk -v e="$eps" -v m="$MINUTES" 'BEGIN {printf "%.1f", e / m}')" "$rss" "$user" "$sys"
    echo "$1 $updates $eps" >> "$WS/results.txt"
}

rm -f "$WS/results.txt"
printf '%-11s %8s %6s %12s %10s %8s %8s\n' setting updates draws episodes/min "peak GB" "user s" "sys s"
for r in $(seq "$ROUNDS"); do
    run "${A[0]}" "${A[1]}" "${A[0]}-$r"
    run "${B[0]}" "${B[1]}" "${B[0]}-$r"
done
awk -v a="${A[0]}" -v b="${B[0]}" '{u[$1] += $2; e[$1] += $3}
     END {printf "%s / %s: updates %.2fx, episodes %.2fx\n", b, a,
          u[b] / (u[a] > 0 ? u[a] : 1), e[b] / (e[a] > 0 ? e[a] : 1)}' "$WS/results.txt"
