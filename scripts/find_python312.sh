#!/usr/bin/env bash
# Prints the path of a Python >= 3.12 interpreter (Harbor's minimum): one on
# PATH, else one of pyenv's. Fails with a hint when there is none (Debian 12
# ships 3.11: install one with pyenv, or use Ubuntu 24.04 / Debian 13).
set -euo pipefail
ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }
for c in python3 python3.13 python3.12; do
  p="$(command -v "$c" 2>/dev/null)" || continue
  if ok "$p"; then echo "$p"; exit 0; fi
done
for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python; do
  if [ -x "$p" ] && ok "$p"; then echo "$p"; exit 0; fi
done
echo "find_python312: no Python >= 3.12 found (Harbor needs it); install one (pyenv install 3.12, or the distribution's python3.12) and rerun" >&2
exit 1
