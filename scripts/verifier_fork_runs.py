#!/usr/bin/env python3
"""What one forked run of the pre-warmed verifier costs, outside any sandbox:
the verifier program (assets/verifier/verifier.py) is prepared as the zygote
prepares it (warm-up run, pytest's configuration, the task's test modules
compiled and parsed ahead), then forks a child that forks the runner, which
runs the task's final tests (tests/test_final_state.py) on this machine's
files, N times; prints the median wall time of a run.

Usage (the host's Python and pytest, as the verifier runs them):
    /usr/bin/python3 -I -S -B scripts/verifier_fork_runs.py VERIFIER.py TASK_DIR N

With valgrind's callgrind, each process writes its instruction count, and a
run's is the runner's less its parent's (forked just before it):
    valgrind --tool=callgrind --callgrind-out-file=OUT/cg.%p /usr/bin/python3 -I -S -B \\
        scripts/verifier_fork_runs.py VERIFIER.py TASK_DIR 2
    grep -H '^totals:' OUT/cg.*
A count, unlike a time, does not move with the load of a shared machine.
"""

import os
import shutil
import sys
import tempfile
import time


def main():
    program, task, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    v = {"__name__": "verifier"}
    exec(compile(open(program).read(), program, "exec"), v)
    v["add_runtime_site_dirs"]()
    scratch, root = tempfile.mkdtemp(), tempfile.mkdtemp()
    try:
        # As the zygote starts (verifier.py: zygote()).
        v["remember_plugin_fixtures"]()
        v["warm_up"](scratch)
        v.get("remember_entry_points", lambda: None)()
        import gc
        gc.collect()
        gc.freeze()
        files = {"pytest.ini": b"[pytest]\n".hex()}
        tests = os.path.join(task, "tests")
        for rel in sorted(os.listdir(tests)):
            with open(os.path.join(tests, rel), "rb") as f:
                files["tests/" + rel] = f.read().hex()
        args = ["-p", "no:cacheprovider", "--noconftest", "--color=no", "-q", "-rA",
                "--rootdir=%s/tests" % root, "-c=%s/pytest.ini" % root]
        payload = {"root": root, "files": files,
                   "args": args + ["%s/tests/test_final_state.py" % root]}
        v["write_tests"](payload)
        # As a request arrives (the hints endless sends with it).
        v["prebuild"](args)
        v["compile_ahead"]({"%s/%s" % (root, rel): bytes.fromhex(h).decode()
                            for rel, h in files.items() if rel.endswith(".py")})
        times = [run_once(v, payload) for _ in range(n)]
    finally:
        shutil.rmtree(scratch)
        shutil.rmtree(root)
    times.sort()
    print("%d runs: median %.1f ms, min %.1f ms" % (n, times[n // 2], times[0]))


def run_once(v, payload):
    """Fork a child that forks the runner (as serve_one does); the wall time
    until the report is read and the child is gone, in milliseconds."""
    r, w = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        runner = os.fork()
        if runner == 0:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            os.dup2(w, 3)
            os._exit(v["run_tests"](payload))
        os._exit(v["exit_code_of"](runner))
    os.close(w)
    with os.fdopen(r, "rb") as f:
        f.read()
    os.waitpid(pid, 0)
    return (time.perf_counter() - start) * 1000


if __name__ == "__main__":
    main()
