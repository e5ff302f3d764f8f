"""`endless_env.ray.run_sharded` on a local Ray cluster of 2 worker CPUs: 4 shards of a
validation and of an oracle evaluation of offline tasks, merged, equal one unsharded run
(verdicts; report and pass@k); a failed shard is reported with its log, nothing is merged,
and the same call again re-runs that shard alone, then merges."""

import json
import pathlib

import pytest

from conftest import endless_home, home_env
from endless_env.ray import ShardsFailed, run_sharded


def with_tasks(home, name, count, seed):
    ws = home / name
    endless_home(home, ws, "generate", "--offline", "--count", str(count), "--seed", str(seed))
    return ws


def verdicts(home, ws):
    # Exits non-zero when a task is invalid: the verdicts are what counts here.
    out = json.loads(endless_home(home, ws, "tasks", "validate", "--all", "--stored", "--json", check=False).stdout)
    return sorted((v["id"], v["ok"], v["problems"]) for v in out)


def test_four_validation_shards_merge_to_the_verdicts_of_one_run(ray_local, tmp_path):
    whole = with_tasks(tmp_path, "whole", 8, 7)
    main = with_tasks(tmp_path, "main", 8, 7)
    endless_home(tmp_path, whole, "tasks", "validate", "--all")
    result = run_sharded(["tasks", "validate", "--all"], 4, main, env=home_env(tmp_path))
    assert result.ok, result
    assert [s.state for s in result.shards] == ["done"] * 4
    assert all(pathlib.Path(s.log).read_text().startswith("$ ") for s in result.shards)
    assert result.merge["job"]["kind"] == "validate"
    ours = verdicts(tmp_path, main)
    assert len(ours) == 8 and all(isinstance(ok, bool) for _, ok, _ in ours)
    assert ours == verdicts(tmp_path, whole)
    # The same call again runs nothing and merges nothing new.
    again = run_sharded(["tasks", "validate", "--all"], 4, main, env=home_env(tmp_path))
    assert [s.state for s in again.shards] == ["done-before"] * 4
    assert all(m["verdicts_merged"] == 0 for m in again.merge["merges"])


def test_four_eval_shards_merge_to_the_report_and_pass_at_k_of_one_run(ray_local, tmp_path):
    whole = with_tasks(tmp_path, "whole", 6, 9)
    main = with_tasks(tmp_path, "main", 6, 9)
    command = ["eval", "--policy", "oracle", "--samples", "2", "--json"]
    run = json.loads(endless_home(tmp_path, whole, *command).stdout)["run"]
    result = run_sharded(command, 4, main, env=home_env(tmp_path))
    assert result.ok and result.merge["finished"] == run, result

    def report(ws):
        return (ws / "runs" / run / "report.md").read_text()

    def pass_at_k(ws):
        tasks = json.loads(endless_home(tmp_path, ws, "tasks", "list", "--json").stdout)
        return sorted((t["id"], t["pass_at_k"]) for t in tasks)

    assert report(main) == report(whole)
    assert pass_at_k(main) == pass_at_k(whole)
    assert all(k["1"] == 1.0 for _, k in pass_at_k(main))


def test_a_failed_shard_is_reported_with_its_log_and_re_run_alone(ray_local, tmp_path):
    main = with_tasks(tmp_path, "main", 4, 3)
    # Shard 1's workspace holds an unfinished shard of another job: that shard refuses to start.
    endless_home(tmp_path, main, "workspace", "shards", str(main / "ray" / "val"), "--count", "4")
    blocker = main / "ray" / "val" / "shard-1" / "shard.json"
    blocker.write_text(json.dumps({
        "shard": 1, "of": 4, "kind": "eval", "key": "0123456789abcdef", "command": ["endless", "eval"],
        "request": {}, "items": 1, "total": 4, "done": False, "started_at": "2026-01-01T00:00:00Z",
        "finished_at": None}))
    with pytest.raises(ShardsFailed) as failed:
        run_sharded("tasks validate --all", 4, main, name="val", env=home_env(tmp_path))
    result = failed.value.result
    assert [s.state for s in result.shards] == ["done", "failed", "done", "done"]
    assert result.merged is None and result.missing == [1]
    message = str(failed.value)
    assert "shard 1/4 failed (exit status" in message and result.shards[1].log in message
    assert "another eval job that has not finished" in message, message
    # The run is recorded for viewers (the TUI's Jobs view): its manifest, each shard's process.
    run_dir = main / "ray" / "val"
    manifest = json.loads((run_dir / "run.json").read_text())
    assert (manifest["engine"], manifest["name"], manifest["kind"]) == ("ray", "val", "validate")
    assert (manifest["command"], manifest["shards"], manifest["merged"]) == (["tasks", "validate", "--all"], 4, None)
    states = [json.loads((run_dir / "logs" / f"shard-{i}.state.json").read_text()) for i in range(4)]
    assert [s["state"] for s in states] == ["exited"] * 4
    assert states[1]["returncode"] not in (0, None) and states[0]["returncode"] == 0
    # Nothing was merged: the main workspace has no verdicts yet.
    assert endless_home(tmp_path, main, "tasks", "validate", "--all", "--stored", check=False).returncode != 0
    blocker.unlink()
    again = run_sharded("tasks validate --all", 4, main, name="val", env=home_env(tmp_path))
    assert [s.state for s in again.shards] == ["done-before", "done", "done-before", "done-before"]
    assert again.ok and len(verdicts(tmp_path, main)) == 4
    merged = json.loads((run_dir / "run.json").read_text())
    assert merged["merged"] == str(main.resolve()) and merged["created_at"] == manifest["created_at"]
    assert json.loads((run_dir / "logs" / "shard-1.state.json").read_text())["returncode"] == 0


def test_shards_that_finish_with_invalid_tasks_are_done_not_failed(ray_local, tmp_path):
    """Issue 48: a shard that finished and reported invalid tasks through its exit status
    raised ShardsFailed, and nothing was merged."""
    whole = with_tasks(tmp_path, "whole", 4, 5)
    main = with_tasks(tmp_path, "main", 4, 5)
    broken = sorted(p.name for p in (main / "tasks").iterdir())[0]
    for ws in (whole, main):
        (ws / "tasks" / broken / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    assert endless_home(tmp_path, whole, "tasks", "validate", "--all", check=False).returncode != 0
    result = run_sharded(["tasks", "validate", "--all"], 2, main, env=home_env(tmp_path))
    assert result.ok and [s.state for s in result.shards] == ["done", "done"], result
    assert any(s.returncode not in (0, None) for s in result.shards), result
    ours = verdicts(tmp_path, main)
    assert [ok for id_, ok, _ in ours if id_ == broken] == [False], ours
    assert ours == verdicts(tmp_path, whole)


def test_bad_commands_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="--shard is set by run_sharded"):
        run_sharded(["tasks", "validate", "--shard", "0/2"], 2, tmp_path)
    with pytest.raises(ValueError, match="shards: must be 1 to"):
        run_sharded(["tasks", "validate"], 0, tmp_path)
    with pytest.raises(FileNotFoundError, match="not an endless workspace"):
        run_sharded(["tasks", "validate"], 2, tmp_path)
