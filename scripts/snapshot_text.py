#!/usr/bin/env python3
"""Print a TUI insta snapshot (src/tui/tests/snapshots/*.snap) as the plain
text of its screen, trailing spaces removed: the TUI captures in README.md and docs/ are
made with it, e.g.

    python3 scripts/snapshot_text.py live_takeover_echo_80x24

(a name is looked up as src/tui/tests/snapshots/*__<name>.snap)."""

import glob
import re
import os
import sys


def screen(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # The header sits between the first two '---' lines.
    parts = text.split("---\n", 2)
    if len(parts) < 3:
        sys.exit(f"{path}: not an insta snapshot (no header)")
    lines = []
    # Rows are quoted as they are (quotes inside are not escaped); a row may
    # be followed by a note on wide characters, which is not part of it.
    with_note = re.compile(r'^"(.*)" Hidden by multi-width symbols: \[.*\]$')
    plain = re.compile(r'^"(.*)"$')
    for n, line in enumerate(parts[2].splitlines(), 1):
        m = with_note.match(line) or plain.match(line)
        if not m:
            sys.exit(f"{path}: line {n} of the screen is not a quoted row")
        lines.append(m.group(1).rstrip())
    return "\n".join(lines)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: snapshot_text.py NAME|PATH")
    arg = sys.argv[1]
    if os.path.isfile(arg):
        path = arg
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        found = glob.glob(os.path.join(here, "..", "src", "tui", "tests", "snapshots", f"*__{arg}.snap"))
        if len(found) != 1:
            sys.exit(f"{arg}: {len(found)} snapshots match")
        path = found[0]
    try:
        print(screen(path))
    except BrokenPipeError:
        pass


if __name__ == "__main__":
    main()
