#!/usr/bin/env python3
"""Runs the whole test suite's binaries, several at a time, and says where the time went.

`cargo test` runs one test binary after another; most of ours wait on
sandboxes, servers and tmux rather than on the CPU, so running a few binaries
at once (longest first, from the times of the last run) shortens the suite
without changing a test. Each binary runs exactly as `cargo test` would run it
(same working directory and arguments), with libtest's JSON output so every
test's time is known: at the end come the failures in full, then the slowest
tests and binaries.

Usage: scripts/run_tests.py [--jobs N] [--only TEXT] [--extra NAME CMD]
  The test binaries come from `cargo test --all-targets --locked --no-run`
  (built first). `--extra NAME CMD` adds one more job (the Python tests), run
  through the shell beside the binaries. ENDLESS_TEST_JOBS sets --jobs
  (default 2). `--only TEXT` runs just the jobs whose name holds TEXT
  (repeatable). Exit status: 0 when every job passed.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMES = ROOT / "target" / "test-times.json"
LOGS = ROOT / "target" / "test-logs"


@dataclass
class Job:
    """One test binary (or extra command) and what running it found."""

    name: str
    argv: list
    libtest: bool = True
    shell: bool = False
    seconds: float = 0.0
    status: int = 0
    passed: int = 0
    failed: list = field(default_factory=list)  # (test name, its output)
    tests: list = field(default_factory=list)  # (seconds, test name)
    summary: str = ""


def test_binaries():
    """Build every test target and return a Job per executable, as cargo test lists them."""
    out = subprocess.run(
        ["cargo", "test", "--all-targets", "--locked", "--no-run",
         "--message-format=json-render-diagnostics"],
        cwd=ROOT, stdout=subprocess.PIPE, check=True, text=True,
    ).stdout
    jobs = []
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        kind = target["kind"][0]
        src = os.path.relpath(target["src_path"], ROOT)
        name = f"{src} ({kind})" if kind in ("lib", "bin") else src
        # Benches use their own harness (criterion), which runs in test mode
        # when called as cargo test calls it: no libtest options.
        jobs.append(Job(name=name, argv=[msg["executable"]], libtest=kind != "bench"))
    return jobs


def run(job):
    """Run one job to its end, keeping its whole output in target/test-logs/."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / (job.name.replace("/", "_").replace(" ", "_") + ".log")
    env = dict(os.environ)
    argv = list(job.argv)
    if job.libtest:
        # libtest's JSON events and per-test times are behind -Z unstable-options;
        # RUSTC_BOOTSTRAP lets the stable test harness accept it. Only the test
        # binaries see it: nothing is compiled with it.
        env["RUSTC_BOOTSTRAP"] = "1"
        argv += ["-Z", "unstable-options", "--format", "json", "--report-time"]
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            argv if not job.shell else argv[0], shell=job.shell, cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
        )
        for line in proc.stdout:
            log.write(line)
            if job.libtest:
                read_event(job, line)
        job.status = proc.wait()
    job.seconds = time.monotonic() - start
    job.log = log_path


def read_event(job, line):
    """Take one line of libtest's JSON output (other lines are a test's own noise)."""
    if not line.startswith("{"):
        return
    try:
        ev = json.loads(line)
    except ValueError:
        return
    if ev.get("type") == "test":
        event, name = ev.get("event"), ev.get("name", "?")
        if event in ("ok", "failed", "timeout"):
            job.tests.append((float(ev.get("exec_time", 0.0)), name))
        if event == "ok":
            job.passed += 1
        elif event == "failed":
            job.failed.append((name, ev.get("stdout", "")))
    elif ev.get("type") == "suite" and ev.get("event") in ("ok", "failed"):
        job.summary = (f"{ev.get('passed', 0)} passed, {ev.get('failed', 0)} failed, "
                       f"{ev.get('ignored', 0)} ignored")


def longest_first(jobs):
    """Order jobs by the time they took last run (unknown ones first: they may be long)."""
    try:
        last = json.loads(TIMES.read_text())
    except (OSError, ValueError):
        last = {}
    return sorted(jobs, key=lambda j: -last.get(j.name, 1e9))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("ENDLESS_TEST_JOBS", "2")))
    parser.add_argument("--extra", nargs=2, action="append", default=[],
                        metavar=("NAME", "COMMAND"))
    parser.add_argument("--only", action="append", default=[], metavar="TEXT")
    args = parser.parse_args()

    jobs = test_binaries()
    jobs += [Job(name=n, argv=[cmd], libtest=False, shell=True) for n, cmd in args.extra]
    if args.only:
        jobs = [j for j in jobs if any(t in j.name for t in args.only)]
    queue = longest_first(jobs)
    lock = threading.Lock()
    started = time.monotonic()
    print(f"run_tests: {len(jobs)} jobs, {args.jobs} at a time", flush=True)

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                job = queue.pop(0)
            run(job)
            with lock:
                ok = job.status == 0 and not job.failed
                what = job.summary or ("exit status %d" % job.status)
                print(f"{'ok  ' if ok else 'FAIL'} {job.seconds:7.1f} s  {job.name}: {what}",
                      flush=True)

    threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started

    try:
        times = json.loads(TIMES.read_text())
    except (OSError, ValueError):
        times = {}
    times.update({j.name: round(j.seconds, 1) for j in jobs})
    TIMES.write_text(json.dumps(times, indent=1))
    bad = [j for j in jobs if j.status != 0 or j.failed]
    for job in bad:
        print(f"\n==== FAILED: {job.name} (exit status {job.status}; log {job.log})")
        for name, out in job.failed:
            print(f"---- {name}\n{out.rstrip()}")
        if not job.failed:
            print("".join(open(job.log, errors="replace").readlines()[-60:]).rstrip())

    tests = sorted(((s, f"{j.name}: {n}") for j in jobs for s, n in j.tests), reverse=True)
    print("\nslowest tests:")
    for s, n in tests[:15]:
        print(f"  {s:7.1f} s  {n}")
    print("slowest jobs:")
    for j in sorted(jobs, key=lambda j: -j.seconds)[:8]:
        print(f"  {j.seconds:7.1f} s  {j.name}")
    total = sum(j.seconds for j in jobs)
    passed = sum(j.passed for j in jobs)
    print(f"\n{passed} tests passed in {len(jobs)} jobs; {len(bad)} jobs failed; "
          f"{wall:.0f} s wall ({total:.0f} s of jobs, {args.jobs} at a time)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
