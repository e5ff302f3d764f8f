"""A Ray actor pool of `endless serve` nodes, behind one client.

    import ray
    from endless_env.pool import ServePool

    ray.init()
    with ServePool("/shared/ws", nodes=4, serve_args=["--max-sessions", "16"]) as pool:
        client = pool.client()          # an endless_env.Client over every node
        s = client.open(task_id)        # on the least loaded node
        ...
        pool.merge()                    # the nodes' episodes into the workspace

Each `ServeNode` actor starts one `endless serve` process and stops it with the actor.
Node I serves its own workspace, `POOL_DIR/node-I` (made from the main workspace with
`endless workspace shards`: task bundles hard-linked), records its episodes under run
`serve-RUN-I`, listens on a free port of its machine and has its own token (written to
`POOL_DIR/node-I/serve.token`, mode 0600). Nodes never share a workspace: the server
numbers a run's samples in memory and the index is SQLite (WAL), which is not safe across
the machines of a network filesystem. `merge` brings the nodes' runs and episodes back
into the main workspace (`endless workspace merge`).

The client (`pool.client()`, or `Client(pool.nodes)`) spreads sessions over the nodes and
passes a create to another node when one is full or does not answer; a node that dies
loses only its own sessions, whose calls raise `endless_env.NodeLost`.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import ray

from .client import Client, Node, Retry
from .ray import _endless, _endless_env, endless_binary

START_TIMEOUT = 120.0


@ray.remote
class ServeNode:
    """One `endless serve` process, started by the actor and stopped with it."""

    def __init__(self, binary: str, workspace: str, run: str, serve_args: Sequence[str],
                 env: Dict[str, str], host: str = "127.0.0.1"):
        self.workspace = workspace
        self.log = str(pathlib.Path(workspace) / "serve.log")
        token_file = str(pathlib.Path(workspace) / "serve.token")
        argv = [binary, "--workspace", workspace, "serve", "--bind", f"{host}:0", "--token-file", token_file,
                "--run", run, *serve_args]
        self._log = open(self.log, "a", encoding="utf-8")
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        found = threading.Event()
        self.url: Optional[str] = None

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self._log.write(line)
                self._log.flush()
                if self.url is None and "listening on " in line:
                    self.url = line.split("listening on ", 1)[1].strip()
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(START_TIMEOUT) or self.url is None:
            self.proc.kill()
            raise RuntimeError(f"endless serve on {workspace} did not start (exit status {self.proc.poll()}); "
                               f"its log: {self.log}")
        if host not in ("127.0.0.1", "::1", "localhost"):
            # Bound to every address (or one): advertise this machine's address.
            port = self.url.rsplit(":", 1)[1]
            self.url = f"http://{ray.util.get_node_ip_address()}:{port}"
        self.token = pathlib.Path(token_file).read_text(encoding="utf-8").split()[0]

    def endpoint(self) -> Dict[str, Any]:
        """`url`, `token`, `pid` of the server, its `workspace` and `log`."""
        return {"url": self.url, "token": self.token, "pid": self.proc.pid, "workspace": self.workspace,
                "log": self.log}

    def alive(self) -> bool:
        """The server process is running."""
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> Optional[int]:
        """Stop the server (SIGTERM: it records its sessions' episodes as interrupted); its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crashed node: its sessions are lost."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class ServePool:
    """`nodes` `ServeNode` actors over the main `workspace` (see the module's documentation).

    `pool_dir` holds the node workspaces (default `WORKSPACE/pool/RUN`); `run` names the
    nodes' runs (`serve-RUN-I`); `serve_args` go to each `endless serve` (`--max-sessions
    N`, say); `host` is the address each binds (`0.0.0.0` on a cluster: the client is then
    given each machine's address); `num_cpus` is what each actor takes from Ray (actors are
    spread over the cluster's machines); `env` is added to each server's environment.
    """

    def __init__(self, workspace: Union[str, os.PathLike], nodes: int = 2, *, run: str = "pool",
                 pool_dir: Optional[Union[str, os.PathLike]] = None, serve_args: Sequence[str] = (),
                 binary: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                 host: str = "127.0.0.1", num_cpus: float = 1):
        if nodes < 1:
            raise ValueError(f"nodes: must be at least 1, not {nodes}")
        self.workspace = pathlib.Path(workspace).resolve()
        if not (self.workspace / "endless.db").exists():
            raise FileNotFoundError(f"workspace: {self.workspace} is not an endless workspace (no endless.db)")
        self.pool_dir = pathlib.Path(pool_dir).resolve() if pool_dir else self.workspace / "pool" / run
        self._binary = endless_binary(binary)
        self._env = _endless_env(env)
        paths = self._node_workspaces(nodes)
        if not ray.is_initialized():
            ray.init()
        actor = ServeNode.options(num_cpus=num_cpus, scheduling_strategy="SPREAD")
        self.actors = [actor.remote(self._binary, str(p), f"{run}-{i}", list(serve_args), self._env, host)
                       for i, p in enumerate(paths)]
        try:
            self.endpoints: List[Dict[str, Any]] = ray.get([a.endpoint.remote() for a in self.actors])
        except Exception:
            self.stop()
            raise

    def _node_workspaces(self, count: int) -> List[pathlib.Path]:
        """`POOL_DIR/node-I`, made from the main workspace when missing (kept when present)."""
        paths = [self.pool_dir / f"node-{i}" for i in range(count)]
        if all((p / "endless.db").exists() for p in paths):
            return paths
        making = self.pool_dir / ".making"
        shutil.rmtree(making, ignore_errors=True)
        _endless(self._binary, str(self.workspace), ["workspace", "shards", str(making), "--count", str(count)],
                 self._env)
        for i, p in enumerate(paths):
            if not (p / "endless.db").exists():
                shutil.rmtree(p, ignore_errors=True)
                os.replace(making / f"shard-{i}", p)
        shutil.rmtree(making, ignore_errors=True)
        return paths

    @property
    def nodes(self) -> List[Node]:
        """The nodes' URLs and tokens, for `Client(pool.nodes)` or `AsyncClient(pool.nodes)`."""
        return [Node(e["url"], e["token"]) for e in self.endpoints]

    def client(self, timeout: float = 600.0, retry: Optional[Retry] = None) -> Client:
        """A `Client` that spreads its sessions over the nodes."""
        return Client(self.nodes, timeout=timeout, retry=retry)

    def kill(self, index: int) -> None:
        """Kill node `index`'s server at once, as a crashed machine would."""
        ray.get(self.actors[index].kill.remote())

    def alive(self) -> List[bool]:
        """Whether each node's server is running: False for a node whose actor died (its
        process or machine is gone) as for one whose server exited."""
        out = []
        for a in self.actors:
            try:
                out.append(bool(ray.get(a.alive.remote())))
            except ray.exceptions.RayError:
                out.append(False)
        return out

    def stop(self) -> List[Optional[int]]:
        """Stop every node's server and its actor; their exit statuses (`None`: actor lost)."""
        codes: List[Optional[int]] = []
        for a in getattr(self, "actors", []):
            try:
                codes.append(ray.get(a.stop.remote()))
            except ray.exceptions.RayError:
                codes.append(None)
            ray.kill(a)
        self.actors = []
        return codes

    def merge(self) -> str:
        """Bring the nodes' runs and episodes into the main workspace (`endless workspace merge`);
        the merge's report (stdout of `--json`)."""
        paths = [str(self.pool_dir / f"node-{i}") for i in range(len(self.endpoints))]
        return _endless(self._binary, str(self.workspace), ["workspace", "merge", *paths, "--json"], self._env)

    def __enter__(self) -> "ServePool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


__all__ = ["ServeNode", "ServePool"]
