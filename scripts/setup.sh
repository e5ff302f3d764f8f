#!/usr/bin/env bash
# Installs what endless needs on a fresh Debian/Ubuntu machine: the sandbox
# (bubblewrap, passt for tasks with network access, and uidmap's newuidmap/newgidmap for
# operators with subordinate ids, whom the tests make throwaway accounts for), the verifier (python3 + pytest), the tools offline tasks use,
# skopeo and umoci for `endless bench images`, podman and runc for the `oci` backend's tests, tmux for the end-to-end TUI test, asciinema (its player checks recordings), python3-venv for the Python package tests, and a Rust toolchain if there is none. mold links the test binaries fast (scripts/linker/cc falls back to the default linker without it).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PKGS="mold slurm-wlm munge bubblewrap passt uidmap passwd iproute2 docker-registry mmdebstrap skopeo umoci podman runc python3 python3-pytest python3-venv tmux asciinema sqlite3 git jq bc zip unzip xz-utils file procps util-linux ca-certificates curl build-essential pkg-config"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: installing the Rust toolchain with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi
