"""ATIF both ways (issues 32 and 49): episodes endless records -- an oracle
eval, a failing scripted run, a fork of it, a session served over HTTP and one
under the `tools` protocol -- are exported with `endless episodes export
--format atif` and every file is validated with PyPI's `atif` (the spec's
pydantic models) and with Harbor's own `Trajectory` model; real `harbor run`
jobs (tests/fixtures/harbor-real) import and export back to their own
documents, and their trials without one (`oracle`, `nop`) export documents
both accept."""

import json
import pathlib

import atif
import pytest
from harbor.models.trajectories import Trajectory as HarborTrajectory

from conftest import ROOT, Server, endless, oracle_reply
from endless_env import Client
from endless_env.tools import ToolSession


def export(ws, out, *args):
    r = endless(ws, "episodes", "export", "--format", "atif", "--out", str(out), "--json", *args)
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A workspace with oracle, failing, forked and served episodes."""
    ws = tmp_path_factory.mktemp("atif-ws")
    endless(ws, "generate", "--offline", "--count", "2", "--seed", "7", "--json")
    ids = [t["id"] for t in json.loads(endless(ws, "tasks", "list", "--json").stdout)]
    endless(ws, "eval", "--policy", "oracle", "--json")
    script = ws / "agent.txt"
    script.write_text("ls\nfalse\n")
    failed = json.loads(endless(ws, "run", ids[0], "--policy", f"script:{script}", "--json", check=False).stdout)
    assert failed["passed"] is False
    run = next(p.name for p in (ws / "runs").iterdir() if p.name.startswith("run-"))
    fork = json.loads(endless(ws, "run", ids[0], "--fork", f"{run}/{ids[0]}/0", "--at-step", "1",
                              "--policy", "oracle", "--json").stdout)
    assert fork["passed"] is True and fork["forked_from"]["run"] == run
    # Written beside each result as sessions finish: `[record] atif = true`.
    (ws / "endless.toml").write_text("[record]\natif = true\n")
    server = Server(ws)
    (ws / "endless.toml").unlink()
    try:
        c = Client(server.url, server.token)
        s = c.open(ids[1], run="atif")
        c.step(s.id, oracle_reply(ws, ids[1]))
        c.step(s.id, "<action>done</action>")
        c.close(s.id)
        t = ToolSession.open(c, ids[0], run="tools")
        command = oracle_reply(ws, ids[0]).split("<command>", 1)[1].rsplit("</command>", 1)[0]
        t.step({"role": "assistant", "content": "Solving.", "tool_calls": [
            {"id": "call_Own1", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        t.step({"role": "assistant", "content": "Done.", "tool_calls": [
            {"id": "call_Own2", "type": "function", "function": {"name": "finish", "arguments": "{}"}}]})
        assert t.done and t.reward == 1.0
        t.close()
    finally:
        assert server.stop() == 0, "".join(server.lines)
    return ws, ids


def validate(doc):
    """`doc` as PyPI's `atif` reads it, once Harbor's own model has accepted it too."""
    HarborTrajectory.model_validate(doc)
    return atif.Trajectory.model_validate(doc)


def test_every_exported_episode_validates_with_the_atif_package_and_harbor(recorded, tmp_path):
    ws, ids = recorded
    written = export(ws, tmp_path / "out")
    # 2 oracle eval episodes, the failing run, its fork, the served session, the tools one.
    assert len(written) == 6, written
    kinds = set()
    for w in written:
        doc = json.loads(pathlib.Path(w["path"]).read_text())
        t = validate(doc)
        assert t.schema_version == "ATIF-v1.8"
        # Every step has the time it was recorded.
        assert all(s.timestamp for s in t.steps), w
        assert [s.step_id for s in t.steps] == list(range(1, len(t.steps) + 1))
        assert t.steps[0].source == "system" and t.steps[1].source == "user"
        verdict = t.final_metrics.extra
        agent = [s for s in t.steps if s.source == "agent"]
        calls = [c for s in agent for c in (s.tool_calls or [])]
        for s in agent:
            for r in (s.observation.results if s.observation else []):
                assert r.source_call_id is None or r.source_call_id in {c.tool_call_id for c in s.tool_calls}
        if w["run"] == "serve-tools":
            # The model's own calls, ids and all, and both functions it was offered.
            kinds.add("tools")
            assert [(c.tool_call_id, c.function_name) for c in calls] == [("call_Own1", "bash"),
                                                                         ("call_Own2", "finish")]
            assert [d["function"]["name"] for d in t.agent.tool_definitions] == ["bash", "finish"]
            assert agent[0].message == "Solving." and verdict["reward"] == 1.0
            assert agent[0].observation.results[0].content.endswith("(exit_code=0)")
            continue
        assert all(c.function_name == "bash" and "command" in c.arguments for c in calls)
        if t.extra["forked_from"]:
            kinds.add("fork")
            assert t.steps[2].is_copied_context is True and verdict["passed"] is True
        elif w["run"] == "serve-atif":  # the server prefixes `serve-`
            kinds.add("serve")
            assert verdict["reward"] == 1.0
        elif verdict["passed"]:
            kinds.add("oracle")
            assert agent[0].llm_call_count == 0 and agent[0].metrics is None
        else:
            kinds.add("failing")
            assert verdict["reward"] < 1.0 and verdict["failure_labels"]
            assert any(r.extra and r.extra.get("exit_code") == 1
                       for s in agent if s.observation for r in s.observation.results)
    assert kinds == {"fork", "serve", "oracle", "failing", "tools"}


def test_a_served_session_writes_its_atif_beside_its_result(recorded):
    ws, ids = recorded
    beside = list((ws / "runs" / "serve-atif" / "episodes").glob("*/*.atif.json"))
    assert len(beside) == 1, beside
    t = validate(json.loads(beside[0].read_text()))
    assert t.final_metrics.extra["passed"] is True and t.extra["run"] == "serve-atif"
    # Episodes recorded without the key have none.
    assert not list((ws / "runs").glob("run-*/episodes/*/*.atif.json"))


def test_a_harbor_job_imports_and_its_trajectories_validate(recorded, tmp_path):
    ws, _ = recorded
    job = ROOT / "tests" / "fixtures" / "harbor-job"
    for f in job.glob("*/agent/trajectory.json"):
        validate(json.loads(f.read_text()))
    report = json.loads(endless(ws, "episodes", "import", str(job), "--run", "harbor-py", "--json").stdout)
    assert (report["episodes"], report["passed"]) == (3, 1)
    written = export(ws, tmp_path / "back", "--run", "harbor-py")
    assert len(written) == 3
    for w in written:
        validate(json.loads(pathlib.Path(w["path"]).read_text()))
    # What endless exported imports back: a directory of ATIF files is no job.
    bad = endless(ws, "episodes", "import", str(tmp_path / "back"), check=False)
    assert bad.returncode != 0 and "not a Harbor job or trial directory" in bad.stderr


@pytest.mark.parametrize("job", ["terminus-2", "oracle", "nop"])
def test_real_harbor_jobs_export_back_to_their_own_documents(recorded, tmp_path, job):
    ws, _ = recorded
    src = ROOT / "tests" / "fixtures" / "harbor-real" / job
    run = f"real-{job}"
    endless(ws, "episodes", "import", str(src), "--run", run, "--json")
    written = export(ws, tmp_path / "back", "--run", run)
    assert written
    for w in written:
        doc = json.loads(pathlib.Path(w["path"]).read_text())
        validate(doc)
        (trial,) = src.glob(f"{w['task']}__*")
        original = trial / "agent" / "trajectory.json"
        if original.exists():
            assert doc == json.loads(original.read_text())
            assert any(c.function_name == "mark_task_complete"
                       for s in validate(doc).steps for c in (s.tool_calls or []))
        else:
            assert doc["final_metrics"]["extra"]["reward"] == (1.0 if job == "oracle" else 0.0)
