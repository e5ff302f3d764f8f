"""endless as an Inspect sandbox environment (PyPI ``inspect-ai``): ``sandbox="endless"``.

Each sample gets a fresh sandbox of an ``endless serve`` (its ``/v1/sandboxes`` API), deleted
when the sample ends. Registered through the ``inspect_ai`` entry point of this package, so
that installing ``endless-env[inspect]`` is enough::

    Task(dataset=..., solver=..., scorer=..., sandbox="endless")
    Task(..., sandbox=("endless", EndlessSandboxConfig(image="debian:bookworm", workdir="/work")))

The server is found through the config's ``url`` or ``$ENDLESS_URL``, the token through
``token_file``, ``$ENDLESS_TOKEN`` or ``$ENDLESS_TOKEN_FILE`` (the config holds no token,
so none ends up in an eval log). A config file (``sandbox=("endless", "endless.yaml")``) is
YAML or JSON with the fields of :class:`EndlessSandboxConfig`. What a sandbox is made from:
an endless task (``task_id``), an image (``image``, default ``debian:bookworm``) or a
directory with a Dockerfile (``environment``).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import posixpath
import random
import shlex
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal, Optional, Union, overload

import httpx
from inspect_ai.util import (ExecResult, OutputLimitExceededError, SandboxConnection, SandboxEnvironment,
                             SandboxEnvironmentConfigType, SandboxEnvironmentLimits, sandboxenv)
from pydantic import BaseModel

from .client import base_url, default_token

__all__ = ["EndlessSandboxConfig", "EndlessSandboxEnvironment"]

# Seconds a request may take beyond a command's own limit.
_SLACK = 60.0
# Limit of a create: the first build of an image can take a while.
_CREATE_TIMEOUT = 1800.0
# A command's limit when Inspect names none.
_DEFAULT_EXEC_TIMEOUT = 3600.0


class EndlessSandboxConfig(BaseModel, frozen=True):
    """What each sample's sandbox is made from, and where the server is."""

    url: Optional[str] = None
    """The server (default: ``$ENDLESS_URL``, else ``http://127.0.0.1:8765``)."""
    token_file: Optional[str] = None
    """A file holding the bearer token (default: ``$ENDLESS_TOKEN``, ``$ENDLESS_TOKEN_FILE``)."""
    task_id: Optional[str] = None
    """An endless task of the server's workspace: the sandbox is that task's."""
    image: Optional[str] = None
    """An image (``debian:bookworm`` when neither ``task_id`` nor ``environment`` is given)."""
    environment: Optional[str] = None
    """A directory with a Dockerfile (and what it copies), built by the server."""
    workdir: Optional[str] = None
    """The working directory: where relative paths of exec, read and write resolve."""
    cpus: Optional[float] = None
    """The sandbox's CPU limit."""
    memory_mb: Optional[int] = None
    """The sandbox's memory limit."""


class SandboxRequestError(RuntimeError):
    """The endless server refused or failed a sandbox request (status and its message)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"endless serve answered {status}: {message}")
        self.status = status
        self.message = message


def _error_text(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except (ValueError, AttributeError):
        return response.text


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _config(config: SandboxEnvironmentConfigType | None) -> EndlessSandboxConfig:
    if config is None:
        return EndlessSandboxConfig()
    if isinstance(config, EndlessSandboxConfig):
        return config
    if isinstance(config, str):
        path = Path(config)
        text = path.read_text(encoding="utf-8")
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{config}: expected a mapping of EndlessSandboxConfig fields")
        if data.get("environment") and not os.path.isabs(data["environment"]):
            data["environment"] = str(path.parent / data["environment"])
        return EndlessSandboxConfig(**data)
    if isinstance(config, BaseModel):
        return EndlessSandboxConfig(**config.model_dump())
    raise TypeError(f"sandbox config for endless: expected EndlessSandboxConfig or a file, got {config!r}")


def _token(cfg: EndlessSandboxConfig) -> Optional[str]:
    if cfg.token_file:
        with open(cfg.token_file, encoding="utf-8") as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    return line.strip()
    return default_token(None)


def _tar_dir(source: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for child in sorted(source.iterdir()):
            tf.add(child, arcname=child.name)
    return buf.getvalue()


def _tar_one(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@sandboxenv(name="endless")
class EndlessSandboxEnvironment(SandboxEnvironment):
    """One sample's endless sandbox (see the module docs)."""

    def __init__(self, cfg: EndlessSandboxConfig, sandbox_id: str, workdir: str, user: Optional[str]):
        super().__init__()
        self._cfg = cfg
        self._url = base_url(cfg.url)
        self._token = _token(cfg)
        self._id = sandbox_id
        self._workdir = workdir
        self._user = user

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    def config_files(cls) -> list[str]:
        return ["endless.yaml", "endless.yml", "endless.json"]

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return EndlessSandboxConfig(**config)

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        cfg = _config(config)
        url = base_url(cfg.url)
        async with httpx.AsyncClient(headers=_headers(_token(cfg))) as http:
            try:
                health = await http.get(f"{url}/v1/health", timeout=10)
            except httpx.HTTPError as e:
                raise RuntimeError(f"endless serve is not reachable at {url} ({e}): start it with "
                                   "`endless serve` and set $ENDLESS_URL or the config's url") from None
        if health.status_code == 401:
            raise RuntimeError(f"endless serve at {url} refused the token: set $ENDLESS_TOKEN, "
                               "$ENDLESS_TOKEN_FILE or the config's token_file")

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        cfg = _config(config)
        body: dict[str, Any] = {}
        if cfg.task_id:
            body["task_id"] = cfg.task_id
        elif cfg.environment:
            body["environment"] = base64.b64encode(_tar_dir(Path(cfg.environment))).decode("ascii")
        else:
            body["image"] = cfg.image or "debian:bookworm"
        for key in ("workdir", "cpus", "memory_mb"):
            value = getattr(cfg, key)
            if value is not None:
                body[key] = value
        url = base_url(cfg.url)
        deadline = time.monotonic() + _CREATE_TIMEOUT
        delay = 0.5
        async with httpx.AsyncClient(headers=_headers(_token(cfg))) as http:
            while True:
                response = await http.post(f"{url}/v1/sandboxes", json=body, timeout=_CREATE_TIMEOUT)
                # A server running its maximum of sandboxes: wait for one to end.
                if response.status_code not in (429, 503) or time.monotonic() > deadline:
                    break
                after = _retry_after(response.headers.get("retry-after"))
                await asyncio.sleep(min(after if after is not None else delay, 10.0) + random.uniform(0, 0.25))
                delay = min(delay * 2, 10.0)
        if response.status_code >= 400:
            raise SandboxRequestError(response.status_code, _error_text(response))
        created = response.json()
        env = cls(cfg, created["sandbox_id"], created.get("workdir") or cfg.workdir or "/",
                  created.get("user"))
        return {"default": env}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment], interrupted: bool) -> None:
        for env in environments.values():
            if isinstance(env, EndlessSandboxEnvironment):
                await env._delete()

    async def _delete(self) -> None:
        async with httpx.AsyncClient(headers=_headers(self._token)) as http:
            response = await http.delete(self._path(), timeout=120)
        if response.status_code >= 400 and response.status_code != 404:
            raise SandboxRequestError(response.status_code, _error_text(response))

    # -- HTTP ---------------------------------------------------------------------------

    def _path(self, suffix: str = "") -> str:
        return f"{self._url}/v1/sandboxes/{self._id}{suffix}"

    def _resolve(self, path: str) -> str:
        return path if posixpath.isabs(path) else posixpath.join(self._workdir, path)

    async def _request(self, method: str, suffix: str, timeout: float, **kw: Any) -> httpx.Response:
        async with httpx.AsyncClient(headers=_headers(self._token)) as http:
            return await http.request(method, self._path(suffix), timeout=timeout, **kw)

    # -- commands -----------------------------------------------------------------------

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        command = shlex.join(cmd)
        stdin_file = None
        if input is not None:
            # The API has no stdin: the input goes to a file the command reads.
            stdin_file = f"/tmp/.inspect-stdin-{uuid.uuid4().hex}"
            data = input.encode("utf-8") if isinstance(input, str) else input
            await self._put("/tmp", _tar_one(posixpath.basename(stdin_file), data))
            command = f"{command} < {stdin_file}; __s=$?; rm -f {stdin_file}; exit $__s"
        body: dict[str, Any] = {"command": command, "cwd": self._resolve(cwd or self._workdir)}
        if env:
            body["env"] = env
        if user is not None:
            body["user"] = user
        if timeout is not None:
            body["timeout_sec"] = float(timeout)
        limit = (float(timeout) if timeout else _DEFAULT_EXEC_TIMEOUT) + _SLACK
        out: dict[str, list[str]] = {"stdout": [], "stderr": []}
        size = {"stdout": 0, "stderr": 0}
        last: dict[str, Any] = {}
        async with httpx.AsyncClient(headers=_headers(self._token)) as http:
            async with http.stream("POST", self._path("/exec"), json=body, timeout=limit) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise SandboxRequestError(response.status_code, _error_text(response))
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    item = json.loads(line)
                    stream = item.get("stream")
                    if stream in out:
                        out[stream].append(item["data"])
                        size[stream] += len(item["data"])
                        if size[stream] > SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE:
                            raise OutputLimitExceededError(
                                limit_str=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                                truncated_output="".join(out[stream])[:1024])
                    else:
                        last = item
        if last.get("error"):
            raise RuntimeError(f"the endless sandbox {self._id} failed during {command[:200]}: {last['error']}")
        if last.get("timed_out"):
            raise TimeoutError(f"the command ran past its {timeout} s limit in the endless sandbox: "
                               f"{command[:200]}")
        code = last.get("exit_code")
        code = code if code is not None else -1
        return ExecResult(success=code == 0, returncode=code, stdout="".join(out["stdout"]),
                          stderr="".join(out["stderr"]))

    # -- files --------------------------------------------------------------------------

    async def _put(self, directory: str, archive: bytes) -> None:
        response = await self._request("PUT", "/files", 600 + _SLACK, params={"path": directory},
                                       content=archive, headers={"Content-Type": "application/x-tar"})
        if response.status_code >= 400:
            raise SandboxRequestError(response.status_code, _error_text(response))

    async def write_file(self, file: str, contents: str | bytes) -> None:
        path = posixpath.normpath(self._resolve(file))
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        probe = await self.exec(["test", "-d", path])
        if probe.success:
            raise IsADirectoryError(f"{file} is a directory in the endless sandbox")
        try:
            await self._put(posixpath.dirname(path) or "/", _tar_one(posixpath.basename(path), data))
        except SandboxRequestError as e:
            if e.status == 403 or "ermission" in e.message:
                raise PermissionError(f"{file}: {e.message}") from e
            raise

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        path = posixpath.normpath(self._resolve(file))
        response = await self._request("GET", "/files", 600 + _SLACK, params={"path": path})
        if response.status_code == 404:
            raise FileNotFoundError(f"{file}: no such file in the endless sandbox")
        if response.status_code >= 400:
            message = _error_text(response)
            if "ermission" in message:
                raise PermissionError(f"{file}: {message}")
            raise SandboxRequestError(response.status_code, message)
        with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:") as tf:
            members = tf.getmembers()
            files = [m for m in members if m.isfile()]
            if len(members) != 1 or len(files) != 1:
                raise IsADirectoryError(f"{file} is not one regular file in the endless sandbox")
            if files[0].size > SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
                raise OutputLimitExceededError(limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR,
                                               truncated_output=None)
            src = tf.extractfile(files[0])
            assert src is not None
            data = src.read()
        if text:
            # Newlines as they are (no universal-newline translation).
            return data.decode("utf-8")
        return data

    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        # The API runs commands, it has no interactive shell: one command through curl.
        body: dict[str, Any] = {"command": "id; pwd", "cwd": self._workdir}
        if user:
            body["user"] = user
        command = (f"curl -sN -H \"Authorization: Bearer $ENDLESS_TOKEN\" "
                   f"-d {shlex.quote(json.dumps(body))} {self._path('/exec')}")
        return SandboxConnection(type="endless", command=command, container=self._id)


def _headers(token: Optional[str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}
