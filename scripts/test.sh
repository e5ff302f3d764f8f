#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite (unit, integration,
# snapshot and end-to-end tests, and the Python package's tests against the
# built `endless` binary). Used by CI (.ci/run) as is.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

# The Python package (python/) is tested against a real `endless serve`, in a
# venv under target/ (reused; pip keeps its own download cache). Harbor needs
# Python >= 3.12: Debian 12's python3 is 3.11, so take a 3.12+ interpreter
# from PATH or pyenv (scripts/find_python312.sh says where to get one).
# The venv is filled while cargo builds (one waits on the network, the other
# on the CPU).
# The build and the caches the tests keep between runs (bounded: see
# tests/support/caches.rs) take about 20 GB on a clean clone, and up to 30 GB
# once the caches are full: say so up front rather than fail in the linker.
FREE_GB="$(df -P --block-size=1G . | awk 'NR==2 {print $4}')"
echo "test.sh: ${FREE_GB} GB free here"
if [ "$FREE_GB" -lt 30 ]; then
  echo "test.sh: warning: under 30 GB free; the build or the tests may run out of disk" >&2
fi
# CI builds once from a clean clone: incremental artifacts would only take disk.
if [ "${CI:-}" = true ]; then
  export CARGO_INCREMENTAL=0
fi

VENV=target/pyenv312
mkdir -p target
if [ ! -x "$VENV/bin/python" ]; then
  PY="$(bash scripts/find_python312.sh)"
  "$PY" -m venv "$VENV"
fi
# ray: for the Ray example's test (python/examples/ray_rollouts.py); datasets: for
# loading the exported parquet as SkyRL does; harbor: Harbor's own CLI runs
# trials in endless sandboxes; atif: the trajectory format's reference models;
# inspect-ai: Inspect's own `inspect eval` runs a task with sandbox="endless".
# If PyPI cannot be reached this fails, and so does the script: no test is skipped.
"$VENV/bin/pip" install -q --upgrade ./python pytest skyrl-gym pyarrow ray datasets harbor atif httpx openai inspect-ai \
  > target/pip-install.log 2>&1 &
PIP=$!

# target/debug/endless for the Python tests (a plain `--bin` build would
# rebuild dependencies with other features).
cargo build --all-targets --locked
if ! wait "$PIP"; then
  cat target/pip-install.log
  echo "test.sh: installing the Python test packages failed" >&2
  exit 1
fi
export ENDLESS_BIN="$PWD/target/debug/endless"

# Every Rust test binary (built by the runner with `cargo test --no-run`) and
# the Python tests, a few at a time; the runner prints the slowest tests at
# the end. pytest exits 5 when it collects no tests: that fails the run too.
python3 scripts/run_tests.py --extra "python/tests (pytest)" "$VENV/bin/python -m pytest -q python/tests"
