#!/usr/bin/env bash
# Sets everything up, builds endless in release mode and opens the TUI on the
# default workspace (a fresh one is seeded with offline tasks). Extra
# arguments go to endless, e.g. `scripts/run.sh --workspace /tmp/ws`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
exec cargo run --release --locked -- "$@"
