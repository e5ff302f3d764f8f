#!/usr/bin/env bash
# The paper's recipe in miniature, on a CPU: SFT a tiny model from scratch on
# oracle trajectories of offline training tasks, measure pass@1 on held-out
# tasks, run PPO on the training tasks for a bounded time, measure again.
#
#   scripts/replicate.sh                 # PPO for 60 minutes
#   MINUTES=10 SFT_STEPS=200 scripts/replicate.sh
#
# Held-out tasks are the dev split of the same families (seeds ending in 9,
# never trained on): a model this small cannot be expected to solve families
# it has never seen. Prints both pass@1 figures and the training curve; the
# run directory (metrics, checkpoints, every episode) is under $WS.
set -euo pipefail
cd "$(dirname "$0")/.."

MINUTES=${MINUTES:-60}
SFT_STEPS=${SFT_STEPS:-500}
TRAIN_TASKS=${TRAIN_TASKS:-960}
DEV_TASKS=${DEV_TASKS:-120}
EVAL_SAMPLES=${EVAL_SAMPLES:-4}
MAX_TURNS=${MAX_TURNS:-4}
# A from-scratch tiny model sampled at temperature 1 makes enough slips in a
# 100-token command that no episode passes whole, and binary reward then gives
# PPO nothing to learn from: sample cooler and reward the fraction of tests passed.
TEMPERATURE=${TEMPERATURE:-0.7}
REWARD=${REWARD:-partial}
SEED=${SEED:-1}
WS=${WS:-target/replication}
FAMILIES=${FAMILIES:-fix-permissions,cleanup-temp-files,extract-archive-subset,find-replace-config,dedupe-lines,todo-extract,zip-and-xz-bundle,bashrc-environment}

cargo build --release --quiet
E=target/release/endless
mkdir -p "$WS"
"$E" --workspace "$WS" generate --offline --families "$FAMILIES" --split train \
    --count "$TRAIN_TASKS" --seed "$SEED"
"$E" --workspace "$WS" generate --offline --families "$FAMILIES" --split dev \
    --count "$DEV_TASKS" --seed "$SEED"
# Ids are `<family>-<seed>-c<complexity>` and dev-split seeds end in 9. Only
# complexities 1 and 2 by default (no follow-up steps): a 2M-parameter model
# must write the whole solution without a slip, and longer ones it never does.
TASKS=${TASKS:-'*0-c1,*1-c1,*2-c1,*3-c1,*4-c1,*5-c1,*6-c1,*7-c1,*8-c1,*0-c2,*1-c2,*2-c2,*3-c2,*4-c2,*5-c2,*6-c2,*7-c2,*8-c2'}
DEV=${DEV:-'*9-c1,*9-c2'}
"$E" --workspace "$WS" train \
    --init tiny --sft --sft-steps "$SFT_STEPS" \
    --tasks "$TASKS" --dev "$DEV" --eval-samples "$EVAL_SAMPLES" \
    --steps 100000 --minutes "$MINUTES" \
    --samples 16 --tasks-per-step 1 --max-turns "$MAX_TURNS" --max-tokens "${MAX_TOKENS:-160}" \
    --temperature "$TEMPERATURE" --reward "$REWARD" \
    --minibatch "${MINIBATCH:-4}" --concurrency 16 --checkpoint-every 10 --seed "$SEED" \
    --out "$WS/checkpoints/replication"
