#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite (unit, integration,
# snapshot and end-to-end tests). Used by CI (.ci/run) as is.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo test --all-targets --locked
