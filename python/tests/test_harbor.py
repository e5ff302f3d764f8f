"""endless as a Harbor environment, through the real `harbor` CLI from PyPI.

`harbor run -e endless_env.harbor:EndlessEnvironment` against a real `endless serve` on a
random loopback port: Harbor's own agents (`oracle`, `nop`) and Harbor's own verifier run
in endless sandboxes, with no Docker daemon. The fixture corpus (`tests/fixtures/harbor`) is
Harbor-format tasks of this repository, each saying in `[metadata] oracle_reward` what its
oracle scores; one installs its test tools from Debian's archive and PyPI through the task's
network, as Terminal-Bench 2's do. Images named `python:3.13-slim-bookworm` are served by the
stand-in in the image store of the suite's shared cache (`$ENDLESS_STAND_INS_CACHE`,
default `target/tmp/stand-ins-cache` of this checkout, as `tests/stand_ins.rs`'s), built
there once from Debian's archive if it is missing.

The job directories are kept for tools that read Harbor jobs back (`endless runs import`):
`$ENDLESS_HARBOR_JOBS` (default `target/harbor-jobs` of this checkout), one per job name
(`oracle`, `nop`, `nop-mixed`, `storage`, `terminus-2`, `terminus-2-wrong`,
`terminus-2-stand-in`), each replaced by the next run of this file. The terminus-2 jobs hold
Harbor's ATIF trajectories (`agent/trajectory.json`) and asciinema recordings of the agent's
tmux pane.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

import harbor  # noqa: F401  (a missing harbor fails these tests; it is never skipped)
from conftest import ROOT, Server, endless

FIXTURES = ROOT / "tests" / "fixtures"
HARBOR_TASKS = FIXTURES / "harbor"
STAND_IN_TASKS = FIXTURES / "harbor-stand-in"
STAND_INS = pathlib.Path(os.environ.get("ENDLESS_STAND_INS_CACHE",
                                        ROOT / "target" / "tmp" / "stand-ins-cache"))
JOBS = pathlib.Path(os.environ.get("ENDLESS_HARBOR_JOBS", ROOT / "target" / "harbor-jobs"))
ENVIRONMENT = "endless_env.harbor:EndlessEnvironment"


def harbor_bin():
    path = shutil.which("harbor", path=os.path.dirname(sys.executable)) or shutil.which("harbor")
    assert path, "the harbor CLI is not installed (pip install harbor, Python >= 3.12)"
    return path


def expected_rewards(corpus):
    """Each task of `corpus` with the reward its oracle scores (`[metadata] oracle_reward`)."""
    expected = {}
    for task in sorted(d for d in corpus.iterdir() if d.is_dir()):
        meta = tomllib.loads((task / "task.toml").read_text()).get("metadata", {})
        assert "oracle_reward" in meta, f"{task / 'task.toml'}: [metadata] oracle_reward is missing"
        expected[task.name] = float(meta["oracle_reward"])
    return expected


def peak(spans):
    """The most of the (start, end) ISO-time spans that overlap at one instant."""
    edges = sorted(edge for start, end in spans
                   for edge in ((datetime.fromisoformat(start), 1), (datetime.fromisoformat(end), -1)))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def stand_in_workspace(tmp_path_factory, name):
    """A fresh workspace whose image store is the suite's shared stand-ins cache's (its own
    builds and sessions stay in the workspace: their records name the workspace's paths)."""
    ws = tmp_path_factory.mktemp(name)
    config = ws / ".config" / "endless"
    config.mkdir(parents=True)
    # No registry: FROM ubuntu/debian builds on the host's system directories, FROM
    # python:3.13-slim-bookworm on its stand-in.
    (config / "config.toml").write_text('[images]\npull = "never"\n')
    store = STAND_INS.resolve() / "images"
    store.mkdir(parents=True, exist_ok=True)
    (ws / ".cache" / "endless" / "sandbox").mkdir(parents=True)
    (ws / ".cache" / "endless" / "sandbox" / "images").symlink_to(store)
    # Cached after the first build (from Debian's archive).
    endless(ws, "--create", "images", "stand-ins", "--only", "python:3.13-slim-bookworm")
    return ws


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server of 4 sessions: `harbor run -n 8` queues its sandbox creates."""
    server = Server(stand_in_workspace(tmp_path_factory, "harbor-ws"), "--max-sessions", "4")
    yield server
    server.stop()


def harbor_env(served, env_extra=None):
    return dict(os.environ, ENDLESS_URL=served.url, ENDLESS_TOKEN_FILE=str(served.ws / "serve.token"),
                PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]),
                # No network: LiteLLM's model price list is the packaged one.
                LITELLM_LOCAL_MODEL_COST_MAP="True", **(env_extra or {}))


def run_harbor(served, agent, tasks, name, *extra, env_extra=None, check=True):
    """`harbor run` with endless as the environment (3 trials at once unless `extra`
    says `-n`); the finished process and its job directory."""
    job = JOBS / name
    shutil.rmtree(job, ignore_errors=True)
    JOBS.mkdir(parents=True, exist_ok=True)
    n = [] if "-n" in extra else ["-n", "3"]
    cmd = [harbor_bin(), "run", "-e", ENVIRONMENT, "-a", agent, "-p", str(tasks), "-o", str(JOBS),
           "--job-name", name, *n, "-y", *extra]
    out = subprocess.run(cmd, env=harbor_env(served, env_extra), capture_output=True, text=True,
                         timeout=600)
    if check:
        assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout}\n{out.stderr}"
    return out, job


def trial_results(job, out):
    trials = [json.loads(r.read_text()) for r in job.glob("*/result.json")]
    assert trials, f"no trial in {job}:\n{out.stdout}\n{out.stderr}"
    return trials


def run_job(served, agent, tasks, name, *extra, env_extra=None):
    """`harbor run` with endless as the environment; the job's trial results by task."""
    out, job = run_harbor(served, agent, tasks, name, *extra, env_extra=env_extra)
    return {t["task_name"]: t for t in trial_results(job, out)}


def reward(trial):
    assert trial.get("exception_info") is None, json.dumps(trial["exception_info"], indent=1)
    return (trial.get("verifier_result") or {}).get("rewards", {}).get("reward")


def sandboxes_left(served):
    health = httpx.get(f"{served.url}/v1/health", headers={"Authorization": f"Bearer {served.token}"})
    return health.json()["sandboxes"]


def test_oracle_scores_the_corpus_as_it_expects_8_trials_at_once_on_4_sessions(served):
    """Issue 49: `harbor run -a oracle -n 8` over the whole corpus (each task twice) against
    `--max-sessions 4`: the creates beyond 4 wait in the server's line, every trial scores
    its task's `oracle_reward`, none errored."""
    expected = expected_rewards(HARBOR_TASKS)
    start = time.monotonic()
    out, job = run_harbor(served, "oracle", HARBOR_TASKS, "oracle", "-n", "8", "-k", "2")
    wall = time.monotonic() - start
    trials = trial_results(job, out)
    errored = [(t["task_name"], t["exception_info"]) for t in trials if t.get("exception_info")]
    assert errored == [], json.dumps(errored, indent=1)
    assert sorted(t["task_name"] for t in trials) == sorted([*expected, *expected])
    scored = [(t["task_name"], reward(t)) for t in trials]
    assert sorted(scored) == sorted((name, r) for name, r in expected.items() for _ in range(2)), scored
    # 8 trials were in flight at once, never more than 4 with a sandbox (from the end of
    # the environment's start, a create that returned, to the trial's end, its deletion).
    in_flight = peak((t["started_at"], t["finished_at"]) for t in trials)
    holding = peak((t["environment_setup"]["finished_at"], t["finished_at"]) for t in trials)
    assert in_flight > 4 >= holding, (in_flight, holding)
    print(f"harbor corpus: {len(trials)} trials (-n 8, --max-sessions 4) in {wall:.1f} s, "
          f"by reward {dict(sorted(Counter(r for _, r in scored).items()))}, at most {in_flight} "
          f"in flight and {holding} holding a sandbox")
    # Harbor read the verifier's files back from the sandbox, and the oracle's log.
    drop = next(job.glob("drop-dir__*"))
    assert json.loads((drop / "verifier" / "reward.json").read_text()) == {"reward": 1.0, "mode_ok": 1.0}
    assert (next(job.glob("count-words__*")) / "agent" / "oracle.txt").exists()
    # Every trial deleted its sandbox.
    assert sandboxes_left(served) == 0


def test_nop_scores_0(served):
    trials = run_job(served, "nop", HARBOR_TASKS, "nop")
    assert set(trials) == set(expected_rewards(HARBOR_TASKS))
    for name, trial in trials.items():
        assert reward(trial) == 0.0, (name, trial.get("verifier_result"))
    # A task of the mixed fixtures (no solution; Harbor's custom verifier script).
    trials = run_job(served, "nop", FIXTURES / "mixed" / "harbor-custom-verifier", "nop-mixed")
    assert [reward(t) for t in trials.values()] == [0.0]
    assert sandboxes_left(served) == 0


def test_more_trials_than_the_server_runs_wait_in_its_line(tmp_path_factory):
    """Issue 49: `-n 4` against `--max-sessions 2`: every trial gets a sandbox in turn."""
    ws = tmp_path_factory.mktemp("harbor-small")
    config = ws / ".config" / "endless"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('[images]\npull = "never"\n')
    small = Server(ws, "--max-sessions", "2")
    try:
        out, job = run_harbor(small, "oracle", HARBOR_TASKS / "count-words", "oracle-queued",
                              "-n", "4", "-k", "4")
        trials = trial_results(job, out)
        assert len(trials) == 4, out.stdout
        assert [reward(t) for t in trials] == [1.0] * 4
        assert sandboxes_left(small) == 0
    finally:
        small.stop()


def test_a_tasks_storage_mb_sizes_its_sandbox(served):
    """Issue 52's `storage-size` through Harbor: `[environment] storage_mb = 1536` and an
    oracle that writes 1100 MiB (the sandbox had 1 GiB whatever the task said: Harbor could
    not even copy the tests in)."""
    trials = run_job(served, "oracle", FIXTURES / "harbor-tb2" / "storage-size", "storage")
    assert [reward(t) for t in trials.values()] == [1.0]
    assert sandboxes_left(served) == 0


def test_a_token_in_kwargs_is_refused_and_never_written(served):
    """Issue 49: `--ek token=...` would land in plain text in the job's files (a valid
    token: the job would run)."""
    secret = served.token
    out, job = run_harbor(served, "nop", HARBOR_TASKS / "count-words", "token-refused",
                          "--ek", f"token={secret}", check=False)
    said = out.stdout + out.stderr
    assert out.returncode != 0, said
    assert "token_file" in said and "ENDLESS_TOKEN" in said, said
    assert secret not in said
    written = [p for p in job.rglob("*") if p.is_file() and secret in p.read_text(errors="replace")]
    assert written == [], written


def test_unknown_kwargs_are_errors(served):
    out, _ = run_harbor(served, "nop", HARBOR_TASKS / "count-words", "unknown-kwarg",
                        "--ek", "tokn_file=/x", check=False)
    assert out.returncode != 0
    assert "Unknown option 'tokn_file'" in out.stdout + out.stderr, out.stdout + out.stderr


def test_no_delete_keeps_the_sandbox(served):
    """Issue 49: Harbor's `--no-delete` keeps the environment: the sandbox stays on
    the server (until its idle timeout)."""
    trials = run_job(served, "oracle", HARBOR_TASKS / "count-words", "kept", "--no-delete")
    assert [reward(t) for t in trials.values()] == [1.0]
    headers = {"Authorization": f"Bearer {served.token}"}
    kept = httpx.get(f"{served.url}/v1/sandboxes", headers=headers).json()
    assert len(kept) == 1, kept
    for sandbox in kept:
        httpx.delete(f"{served.url}/v1/sandboxes/{sandbox['sandbox_id']}", headers=headers)
    assert sandboxes_left(served) == 0


def test_an_unreachable_server_is_said_before_any_trial(served, tmp_path):
    env = dict(os.environ, ENDLESS_URL="http://127.0.0.1:9", ENDLESS_TOKEN="x",
               PYTHONPATH=str(ROOT / "python"), LITELLM_LOCAL_MODEL_COST_MAP="True")
    out = subprocess.run([harbor_bin(), "run", "-e", ENVIRONMENT, "-a", "nop", "-p",
                          str(HARBOR_TASKS / "count-words"), "-o", str(tmp_path), "-y"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "endless serve is not reachable at http://127.0.0.1:9" in out.stdout + out.stderr


class FixtureLLM:
    """An OpenAI-compatible server whose every reply, in terminus-2's JSON format, types
    `keys` into the agent's terminal and says the task is complete (terminus-2 asks to
    confirm; the same reply confirms)."""

    def __init__(self, keys):
        self.requests = 0
        fixture = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                fixture.requests += 1
                content = json.dumps({"analysis": "The task is described above.", "plan": "Type the solution.",
                                      "commands": [{"keystrokes": keys, "duration": 0.5}],
                                      "task_complete": True})
                data = json.dumps({
                    "id": f"fixture-{fixture.requests}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "fixture"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                }).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def run_terminus(served, keys, name, task=HARBOR_TASKS / "count-words"):
    llm = FixtureLLM(keys)
    try:
        trials = run_job(served, "terminus-2", task, name, "-m", "openai/fixture",
                         "--ak", f"api_base={llm.url}", env_extra={"OPENAI_API_KEY": "fixture"})
    finally:
        llm.close()
    assert llm.requests >= 2, "terminus-2 never asked the fixture model (or never confirmed)"
    (trial,) = trials.values()
    return trial


def test_terminus_2_acts_through_tmux_in_the_sandbox(served):
    trial = run_terminus(served, "wc -w < /app/data/poem.txt > /app/word_count.txt\n", "terminus-2")
    assert reward(trial) == 1.0, trial.get("verifier_result")
    job = JOBS / "terminus-2"
    trajectory = json.loads(next(job.glob("*/agent/trajectory.json")).read_text())
    assert trajectory["schema_version"].startswith("ATIF-")
    seen = json.dumps(trajectory["steps"])
    # The pane is the sandbox's: its hostname and the command's echo.
    assert "root@sandbox:/app# wc -w" in seen, seen[:2000]
    # Keystrokes that do not solve the task score 0: the reward is the agent's doing.
    wrong = run_terminus(served, "echo 3 > /app/word_count.txt\n", "terminus-2-wrong")
    assert reward(wrong) == 0.0, wrong.get("verifier_result")
    assert sandboxes_left(served) == 0


def test_terminus_2_installs_tmux_with_apt_on_a_stand_in_image(served):
    """Issue 49: terminus-2 on an image without tmux (the python:3.13-slim-bookworm stand-in;
    the Dockerfile fails its build if tmux is there) installs it with apt-get inside the
    sandbox, through the task's network, as on Docker, and acts through it to reward 1."""
    keys = ("wc -w < /app/data/poem.txt > /app/word_count.txt; "
            "dpkg-query -W -f='tmux ${Status}\\n' tmux; cat /etc/debian_version\n")
    trial = run_terminus(served, keys, "terminus-2-stand-in", STAND_IN_TASKS / "tmux-count-words")
    assert reward(trial) == 1.0, trial.get("verifier_result")
    steps = json.dumps(json.loads(next((JOBS / "terminus-2-stand-in").glob("*/agent/trajectory.json"))
                                  .read_text())["steps"])
    # tmux came from Debian's archive, into the stand-in's Debian (trixie, 13), not the host's.
    assert "tmux install ok installed" in steps, steps[:3000]
    assert "root@sandbox:/app# wc -w" in steps and "\\n13." in steps, steps[:3000]
    assert sandboxes_left(served) == 0
