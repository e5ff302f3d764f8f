"""Fixtures: a real `endless serve` on a fresh workspace with offline tasks.

The binary is `$ENDLESS_BIN` (default: target/debug/endless of this checkout).
"""

import json
import os
import pathlib
import signal
import subprocess
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("ENDLESS_BIN", str(ROOT / "target" / "debug" / "endless"))


def endless(ws, *args, check=True):
    env = dict(os.environ, XDG_CACHE_HOME=str(ws / ".cache"), XDG_STATE_HOME=str(ws / ".state"),
               XDG_CONFIG_HOME=str(ws / ".config"))
    return subprocess.run([BIN, "--workspace", str(ws), *args], env=env, capture_output=True, text=True,
                          check=check, timeout=600)


def oracle_reply(ws, task_id):
    script = (ws / "tasks" / task_id / "solution" / "solve.sh").read_text()
    delim = "ENDLESS_SOLVE_EOF"
    while any(line.strip() == delim for line in script.splitlines()):
        delim += "_"
    body = script.rstrip("\n")
    return f"<think>Run the solution.</think>\n<command>bash <<'{delim}'\n{body}\n{delim}</command>"


class Server:
    def __init__(self, ws, *extra):
        self.ws = ws
        token_file = ws / "serve.token"
        env = dict(os.environ, XDG_CACHE_HOME=str(ws / ".cache"), XDG_STATE_HOME=str(ws / ".state"),
                   XDG_CONFIG_HOME=str(ws / ".config"))
        self.proc = subprocess.Popen(
            [BIN, "--workspace", str(ws), "serve", "--bind", "127.0.0.1:0", "--token-file", str(token_file),
             "--run", "pytest", *extra],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        found = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line)
                if "listening on " in line:
                    self.url = line.split("listening on ", 1)[1].strip()
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(60) or not hasattr(self, "url"):
            self.proc.kill()
            raise RuntimeError("endless serve did not start:\n" + "".join(self.lines))
        self.token = token_file.read_text().split()[0]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def workspace(tmp_path_factory):
    ws = tmp_path_factory.mktemp("ws")
    endless(ws, "generate", "--offline", "--count", "3", "--seed", "11", "--json")
    return ws


@pytest.fixture(scope="session")
def task_ids(workspace):
    return [t["id"] for t in json.loads(endless(workspace, "tasks", "list", "--json").stdout)]


@pytest.fixture(scope="session")
def server(workspace):
    s = Server(workspace)
    yield s
    assert s.stop() == 0, "".join(s.lines)


def endless_home(home, ws, *args, check=True):
    """`endless --workspace WS --create ARGS` with the cache, state and config of `home`, shared
    by every workspace of a test (as a cluster's nodes share them)."""
    return subprocess.run([BIN, "--workspace", str(ws), "--create", *args], env=dict(os.environ, **home_env(home)),
                          capture_output=True, text=True, check=check, timeout=600)


def home_env(home):
    """The XDG directories below `home`."""
    return {"XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".state"),
            "XDG_CONFIG_HOME": str(home / ".config")}


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray cluster of 2 worker CPUs for the session (`ray` is installed by scripts/test.sh)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"ENDLESS_BIN": BIN}})
    yield ray
    ray.shutdown()
