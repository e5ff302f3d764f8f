"""endless as an Inspect sandbox environment (`sandbox="endless"`), with the real `inspect-ai`
from PyPI against a real `endless serve`: the sandbox API one call at a time (exec with input,
env, cwd, user and timeout; text and binary files; connection; cleanup), then a real
`inspect eval` of a task of ours (inspect_tasks/file_task.py: Inspect's own mock model writes a
file with Inspect's `bash` tool, the scorer reads it back) with several samples in their own
sandboxes at once (more than the server runs: the others wait), scored right."""

import asyncio
import json
import os
import shutil
import subprocess
import sys

import httpx
import pytest

import inspect_ai  # noqa: F401  (a missing inspect-ai fails these tests; it is never skipped)
from conftest import ROOT, Server
from endless_env.inspect_sandbox import EndlessSandboxConfig, EndlessSandboxEnvironment

TASK = ROOT / "python" / "tests" / "inspect_tasks" / "file_task.py"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    ws = tmp_path_factory.mktemp("inspect-ws")
    config = ws / ".config" / "endless"
    config.mkdir(parents=True)
    # No network in tests: debian:bookworm is the host's system directories.
    (config / "config.toml").write_text('[images]\npull = "never"\n')
    # Fewer sandboxes than the eval asks for: the rest wait for one to end.
    server = Server(ws, "--max-sessions", "2")
    yield server
    server.stop()


def sandboxes_left(served):
    health = httpx.get(f"{served.url}/v1/health", headers={"Authorization": f"Bearer {served.token}"})
    return health.json()["sandboxes"]


def test_the_sandbox_api_one_call_at_a_time(served):
    cfg = EndlessSandboxConfig(url=served.url, token_file=str(served.ws / "serve.token"),
                               image="debian:bookworm", workdir="/work")

    async def run():
        envs = await EndlessSandboxEnvironment.sample_init("t", cfg, {})
        env = envs["default"]
        try:
            r = await env.exec(["pwd"])
            assert (r.success, r.stdout) == (True, "/work\n")
            r = await env.exec(["sh", "-c", 'echo "$GREETING" from $(pwd); echo oops >&2; exit 3'],
                               env={"GREETING": "hi"}, cwd="/tmp")
            assert (r.success, r.returncode, r.stdout, r.stderr) == (False, 3, "hi from /tmp\n", "oops\n")
            r = await env.exec(["wc", "-c"], input=b"\x00\x01 binary in\n")
            assert r.stdout.strip() == "13"
            r = await env.exec(["cat"], input="line 1\r\nline 2 'quoted' $HOME\n")
            assert r.stdout == "line 1\r\nline 2 'quoted' $HOME\n"
            r = await env.exec(["id", "-u"], user="root")
            assert r.stdout.strip() == "0"
            with pytest.raises(TimeoutError):
                await env.exec(["sleep", "30"], timeout=1)
            await env.write_file("sub/dir/a.txt", "crlf\r\nkept\n")
            assert await env.read_file("sub/dir/a.txt") == "crlf\r\nkept\n"
            assert await env.read_file("/work/sub/dir/a.txt", text=False) == b"crlf\r\nkept\n"
            blob = bytes(range(256)) * 4
            await env.write_file("/tmp/blob.bin", blob)
            assert await env.read_file("/tmp/blob.bin", text=False) == blob
            r = await env.exec(["stat", "-c", "%s", "/tmp/blob.bin"])
            assert r.stdout.strip() == "1024"
            with pytest.raises(FileNotFoundError):
                await env.read_file("missing.txt")
            with pytest.raises(IsADirectoryError):
                await env.read_file("sub")
            with pytest.raises(IsADirectoryError):
                await env.write_file("sub", "x")
            conn = await env.connection()
            assert conn.type == "endless" and env._id in conn.command
            assert sandboxes_left(served) == 1
        finally:
            await EndlessSandboxEnvironment.sample_cleanup("t", cfg, envs, False)
        assert sandboxes_left(served) == 0

    asyncio.run(run())


def inspect_bin():
    path = shutil.which("inspect", path=os.path.dirname(sys.executable)) or shutil.which("inspect")
    assert path, "the inspect CLI is not installed (pip install inspect-ai)"
    return path


def test_inspect_eval_scores_a_file_the_solver_wrote_in_each_sandbox(served, tmp_path):
    env = dict(os.environ, ENDLESS_URL=served.url, ENDLESS_TOKEN_FILE=str(served.ws / "serve.token"),
               PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]),
               INSPECT_LOG_DIR=str(tmp_path / "logs"))
    cmd = [inspect_bin(), "eval", TASK.name, "--max-samples", "6", "--max-sandboxes", "3",
           "--log-format", "json", "--display", "plain", "--no-log-realtime"]
    out = subprocess.run(cmd, env=env, cwd=TASK.parent, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout}\n{out.stderr}"
    (log,) = (tmp_path / "logs").glob("*.json")
    result = json.loads(log.read_text())
    assert result["status"] == "success", (result.get("error") or {}).get("traceback")
    assert result["eval"]["sandbox"]["type"] == "endless"
    scores = {s["id"]: s["scores"]["answer_file"]["value"] for s in result["samples"]}
    assert scores == {"apple": "C", "birch": "C", "cedar": "C", "delta": "C", "ember": "C", "fjord": "I"}
    answers = {s["id"]: s["scores"]["answer_file"]["answer"] for s in result["samples"]}
    assert answers["fjord"] == "fjord"
    # Each sample ran in a sandbox of its own (each wrote its own answer.txt), several at
    # once: some sample started before another had finished.
    spans = sorted((s["started_at"], s["completed_at"]) for s in result["samples"])
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans
    assert sandboxes_left(served) == 0
