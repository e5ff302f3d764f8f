"""The Ray example (python/examples/ray_rollouts.py) against a real server.

`ray` is installed by scripts/test.sh; when it is missing (PyPI unreachable) this test
fails, it does not skip.
"""

import json
import pathlib
import sqlite3
import subprocess
import sys

import ray  # noqa: F401  (a missing ray is a failure, not a skip)

from conftest import ROOT

EXAMPLE = ROOT / "python" / "examples" / "ray_rollouts.py"


def test_ray_tasks_run_oracle_and_looping_episodes_through_endless_env(server, workspace, task_ids):
    r = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", server.url, "--token-file", str(workspace / "serve.token"),
         "--workspace", str(workspace), "--episodes", "3", "--loop-episodes", "1", "--max-turns", "6",
         "--run", "ray-test", "--num-cpus", "2"],
        capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr[-4000:]}"
    out = json.loads(r.stdout[r.stdout.index("{\n"):])
    episodes = out["episodes"]
    assert len(episodes) == 4
    oracle = [e for e in episodes if e["policy"] == "oracle"]
    loop = [e for e in episodes if e["policy"] == "loop"]
    assert [e["reward"] for e in oracle] == [1.0, 1.0, 1.0]
    assert all(e["done"] and e["end_reason"] == "done" for e in oracle)
    assert loop[0]["reward"] == 0.0 and loop[0]["failure_mode"] == "loop"
    assert out["mean_reward"] == {"oracle": 1.0, "loop": 0.0}
    # Every episode is recorded in the server's workspace under the client's run.
    db = sqlite3.connect(f"file:{pathlib.Path(workspace) / 'endless.db'}?mode=ro", uri=True)
    rows = db.execute("SELECT passed, failure_mode FROM episodes WHERE run_id = 'serve-ray-test'").fetchall()
    db.close()
    assert sorted(rows, key=str) == sorted([(1, None)] * 3 + [(0, "loop")], key=str)
