"""Sharded `endless` commands as Ray tasks: `run_sharded`.

    import ray
    from endless_env.ray import run_sharded

    ray.init()  # or ray.init(address="auto") on a cluster
    result = run_sharded(["tasks", "validate", "--all"], shards=8, workspace="/shared/ws")
    print(result.merged, [s.state for s in result.shards])

Each shard is one Ray task that runs one `endless` process,
`endless --workspace DIR/shard-I COMMAND --shard I/N`, in its own shard workspace
(made by `endless workspace shards`, task bundles hard-linked), its output in
`DIR/logs/shard-I.log`; `DIR` is `WORKSPACE/ray/NAME` (NAME: `name`, else a digest of the
command and N). When every shard is done the driver merges them into the workspace
(`endless workspace merge DIR`): the same tasks, verdicts, report and pass@k as one
unsharded run. A shard that fails is reported with its log (`ShardsFailed`), and nothing
is merged unless `allow_partial`; calling `run_sharded` again with the same arguments
runs only the shards that are not done (a shard's `shard.json` says so), each resuming
its own work, then merges.

The run is recorded for viewers (`endless tui`'s Jobs view): `DIR/run.json` (the
command, N, when it started, where it was merged) written by the driver, and
`DIR/logs/shard-I.state.json` written by shard I's task when its process starts
(`running`) and exits (`exited`, with its exit status), or by the driver when Ray lost
the task (`lost`); each write is atomic. A shard without a state file is queued.

The workspace directory must be reachable at the same path from every Ray node (a
shared filesystem), and so must the `endless` binary (`binary`, else `$ENDLESS_BIN`,
else `endless` on PATH).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import ray

LOG_TAIL_LINES = 20


def endless_binary(binary: Optional[str] = None) -> str:
    """The `endless` binary to run: `binary`, else `$ENDLESS_BIN`, else `endless` on PATH."""
    path = binary or os.environ.get("ENDLESS_BIN") or shutil.which("endless")
    if not path:
        raise FileNotFoundError("no `endless` binary: pass binary=, set ENDLESS_BIN, or put endless on PATH")
    return str(pathlib.Path(path).resolve())


@dataclass
class ShardStatus:
    """One shard of a `run_sharded` call.

    `state`: `done` (ran now and finished: its `shard.json` says so, whatever its exit
    status, which is not 0 when it found invalid tasks or audit findings), `done-before`
    (finished by an earlier call, not run again), `failed` (it did not finish: its process
    failed, or Ray lost its task) or `not-run`. `returncode` is its process's exit status.
    """

    index: int
    workspace: str
    log: str
    state: str = "not-run"
    returncode: Optional[int] = None
    seconds: Optional[float] = None
    node: Optional[str] = None
    error: Optional[str] = None

    @property
    def done(self) -> bool:
        """Its work is finished (now or before)."""
        return self.state in ("done", "done-before")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last `lines` lines of its log ('' when there is none)."""
        try:
            text = pathlib.Path(self.log).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class ShardedResult:
    """What `run_sharded` did: each shard's status and log, and the merge.

    `merged` is the workspace merged into (`None`: nothing was merged), `merge` the merge
    report (`endless workspace merge --json`), `missing` the shards the merge left out
    (a partial merge)."""

    command: List[str]
    count: int
    shard_dir: str
    shards: List[ShardStatus]
    merged: Optional[str] = None
    merge: Optional[Dict[str, Any]] = None
    missing: List[int] = field(default_factory=list)

    @property
    def failed(self) -> List[ShardStatus]:
        """The shards that failed in this call."""
        return [s for s in self.shards if s.state == "failed"]

    @property
    def ok(self) -> bool:
        """Every shard is done and the job was merged."""
        return all(s.done for s in self.shards) and self.merged is not None


class ShardsFailed(RuntimeError):
    """Shards failed (did not finish; one that finished with findings is done): the message names each, with its exit status, log and the log's last
    lines. `result` is the `ShardedResult`; the same `run_sharded` call again re-runs only
    the shards that are not done."""

    def __init__(self, result: ShardedResult):
        parts = []
        for s in result.failed:
            why = s.error or f"exit status {s.returncode}"
            tail = s.log_tail()
            parts.append(f"shard {s.index}/{result.count} failed ({why}); log {s.log}"
                         + (f":\n{tail}" if tail else ""))
        merged = ("the shards that are done were merged (allow_partial)" if result.merged
                  else "nothing was merged")
        super().__init__(f"{len(result.failed)} of {result.count} shards of `endless {shlex.join(result.command)}` "
                         f"failed; {merged}; run the same call again to re-run only those not done.\n"
                         + "\n".join(parts))
        self.result = result


def _write_json(path: Union[str, os.PathLike], obj: Dict[str, Any]) -> None:
    """Write `obj` as JSON to `path` atomically (a temporary file renamed over it)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _state_path(log: str) -> str:
    """Where shard's process state lives: beside its log, `shard-I.state.json`."""
    return str(pathlib.Path(log).with_suffix(".state.json"))


def _endless_env(env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    out = dict(os.environ)
    out.update(env or {})
    return out


@ray.remote
def _run_shard(argv: List[str], env: Dict[str, str], log: str, timeout: Optional[float]) -> Dict[str, Any]:
    """One shard's `endless` process in a Ray worker, its output in `log`."""
    start = time.monotonic()
    node = socket.gethostname()
    state = _state_path(log)
    _write_json(state, {"state": "running", "node": node, "pid": os.getpid(), "started_at": _now()})
    with open(log, "w", encoding="utf-8") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        out.flush()
        try:
            rc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
            error = None
        except subprocess.TimeoutExpired:
            rc, error = None, f"timed out after {timeout:g}s"
        except OSError as e:
            rc, error = None, f"could not start {argv[0]}: {e}"
    seconds = time.monotonic() - start
    _write_json(state, {"state": "exited", "node": node, "returncode": rc, "error": error,
                        "seconds": seconds, "ended_at": _now()})
    return {"returncode": rc, "error": error, "seconds": seconds, "node": node}


def _record(shard_ws: pathlib.Path) -> Optional[Dict[str, Any]]:
    path = shard_ws / "shard.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise RuntimeError(f"{path}: unreadable shard record: {e}") from e


def _finished(record: Optional[Dict[str, Any]], command: List[str], index: int, count: int) -> bool:
    """The shard record says this very shard of this command is done."""
    if not record or not record.get("done"):
        return False
    tail = [*command, "--shard", f"{index}/{count}"]
    argv = record.get("command") or []
    return record.get("shard") == index and record.get("of") == count and argv[-len(tail):] == tail


def _endless(binary: str, workspace: str, args: Sequence[str], env: Dict[str, str]) -> str:
    """Run `endless --workspace WS ARGS` on the driver; its stdout, or an error with its stderr."""
    argv = [binary, "--workspace", workspace, *args]
    r = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"`{shlex.join(argv)}` failed (exit status {r.returncode}):\n{r.stderr.strip()}")
    return r.stdout


def _kind(cmd: List[str]) -> str:
    """What the sharded command does: `validate`, `audit`, `eval`, `generate`."""
    return cmd[1] if cmd[0] == "tasks" and len(cmd) > 1 else cmd[0]


def _check_command(command: Union[str, Sequence[str]]) -> List[str]:
    cmd = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    if not cmd:
        raise ValueError("command: empty; give an endless command such as ['tasks', 'validate', '--all']")
    for flag in ("--shard", "--workspace"):
        if any(c == flag or c.startswith(flag + "=") for c in cmd):
            raise ValueError(f"command: {flag} is set by run_sharded, leave it out of {cmd}")
    return cmd


def run_sharded(command: Union[str, Sequence[str]], shards: int, workspace: Union[str, os.PathLike],
                *, name: Optional[str] = None, binary: Optional[str] = None,
                env: Optional[Mapping[str, str]] = None, allow_partial: bool = False,
                num_cpus: float = 1, timeout: Optional[float] = None, check: bool = True) -> ShardedResult:
    """Run the endless `command` (`tasks validate ...`, `tasks audit ...`, `eval ...`,
    `generate --offline ...`;
    without `--workspace` or `--shard`) as `shards` Ray tasks, one `endless` process each
    (`num_cpus` Ray CPUs apiece, `timeout` seconds at most), then merge them into
    `workspace`. `env` is added to each process's environment (`XDG_CACHE_HOME` for a
    shared image cache, say). Connects to Ray with `ray.init()` when not connected yet.

    Shards that are done (by this call or an earlier one with the same command) are not
    run again. When a shard fails: with `check`, raises `ShardsFailed` (after merging the
    shards that are done when `allow_partial`); without, returns the result with its
    failed shards and `merged` `None` (unless `allow_partial`)."""
    cmd = _check_command(command)
    if not 1 <= int(shards) <= 10_000:
        raise ValueError(f"shards: must be 1 to 10000, not {shards}")
    count = int(shards)
    main = pathlib.Path(workspace).resolve()
    if not (main / "endless.db").exists():
        raise FileNotFoundError(f"workspace: {main} is not an endless workspace (no endless.db)")
    exe = endless_binary(binary)
    full_env = _endless_env(env)
    slug = name or hashlib.sha256("\0".join([*cmd, str(count)]).encode()).hexdigest()[:12]
    shard_dir = main / "ray" / slug
    statuses = [ShardStatus(i, str(shard_dir / f"shard-{i}"), str(shard_dir / "logs" / f"shard-{i}.log"))
                for i in range(count)]
    todo = []
    for s in statuses:
        if _finished(_record(pathlib.Path(s.workspace)), cmd, s.index, count):
            s.state = "done-before"
        else:
            todo.append(s)
    manifest_path = shard_dir / "run.json"
    manifest = {"engine": "ray", "name": slug, "kind": _kind(cmd), "command": cmd, "shards": count,
                "created_at": _now(), "merged": None}
    try:
        manifest["created_at"] = json.loads(manifest_path.read_text(encoding="utf-8"))["created_at"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if todo:
        _endless(exe, str(main), ["workspace", "shards", str(shard_dir), "--count", str(count)], full_env)
        _write_json(manifest_path, manifest)
        for s in todo:
            # Queued again: what an earlier call's process said is over.
            try:
                os.unlink(_state_path(s.log))
            except FileNotFoundError:
                pass
        if not ray.is_initialized():
            ray.init()
        remote = _run_shard.options(num_cpus=num_cpus)
        refs = [remote.remote([exe, "--workspace", s.workspace, *cmd, "--shard", f"{s.index}/{count}"],
                              full_env, s.log, timeout) for s in todo]
        for s, ref in zip(todo, refs):
            try:
                out = ray.get(ref)
            except ray.exceptions.RayError as e:
                s.state, s.error = "failed", f"Ray lost the task: {e}"
                _write_json(_state_path(s.log), {"state": "lost", "error": s.error, "ended_at": _now()})
                continue
            s.returncode, s.seconds, s.node, s.error = out["returncode"], out["seconds"], out["node"], out["error"]
            # A shard that recorded its work done succeeded, even when its command reports what
            # it found with its exit status (invalid tasks, audit findings).
            if _finished(_record(pathlib.Path(s.workspace)), cmd, s.index, count):
                s.state = "done"
            else:
                s.state = "failed"
                if s.returncode == 0:
                    s.error = f"exit status 0, but {s.workspace}/shard.json does not mark it done"
    result = ShardedResult(cmd, count, str(shard_dir), statuses)
    result.missing = [s.index for s in statuses if not s.done]
    if not result.missing or (allow_partial and len(result.missing) < count):
        args = ["workspace", "merge", str(shard_dir), "--json"] + (["--allow-partial"] if result.missing else [])
        result.merge = json.loads(_endless(exe, str(main), args, full_env))
        result.merged = str(main)
        manifest["merged"] = str(main)
        _write_json(manifest_path, manifest)
    if result.failed and check:
        raise ShardsFailed(result)
    return result


__all__ = ["ShardStatus", "ShardedResult", "ShardsFailed", "endless_binary", "run_sharded"]
