"""endless as a Harbor environment: every trial in an endless sandbox, no Docker daemon.

    harbor run -e endless_env.harbor:EndlessEnvironment -a oracle -p TASK_DIR -o JOBS_DIR -y

The environment talks to a running ``endless serve`` through its sandbox API
(``/v1/sandboxes``): the task's ``environment/`` directory (its Dockerfile and build
context) is sent at start and built by endless like any Harbor task's; commands, the
agent's and Harbor's own verifier's, run in the sandbox as its user (root for Harbor
tasks), or as the ``user`` Harbor asks for, under the same isolation as every endless
session, their output streamed as it comes; files go up and down as tar.

Where the server is (the only ``--ek`` options; any other is an error):

* ``--ek url=http://HOST:PORT`` or ``$ENDLESS_URL`` (default ``http://127.0.0.1:8765``);
* ``--ek token_file=PATH``, ``$ENDLESS_TOKEN`` or the first token in
  ``$ENDLESS_TOKEN_FILE`` (the file ``endless serve --token-file`` wrote). A token itself
  is refused in ``--ek``: Harbor writes the kwargs in plain text into the job's
  ``config.json``, ``lock.json`` and every trial's ``result.json``.

A task's network follows its ``[environment] network_mode``: ``public`` (Harbor's
default) gets the network through pasta with the host's loopback unreachable,
``no-network`` none; ``allowlist`` is refused. Over the server's ``--max-sessions`` a
trial's sandbox waits in line (and the environment retries a refused create with
backoff), so ``-n`` above the server's limit just queues. ``--no-delete`` keeps the
sandbox (until the server's ``--idle-timeout``). Another ``user`` than the sandbox's runs
only when the server runs as root (its sandboxes map the image's accounts; a rootless
server's run their own user only), and a download is at most 16 MiB. Needs Python >= 3.12
and ``harbor`` (``pip install 'endless-env[harbor]'``); the rest of ``endless_env``
does not import this module.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import posixpath
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx
from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.options import EnvironmentOptions
from harbor.models.task.config import NetworkMode
from harbor.models.trial.paths import EnvironmentPaths
from pydantic import field_validator

from .client import base_url

__all__ = ["EndlessEnvironment", "SandboxError"]

# Seconds a request may take beyond a command's own limit.
_SLACK = 60.0
# Limit of a create: the first build of an image can take a while.
_CREATE_TIMEOUT = 1800.0
# A command's limit when Harbor names none (the server's default too).
_DEFAULT_EXEC_TIMEOUT = 3600.0
# Seconds a create waits in the server's line for a place (cut to its --max-wait).
_CREATE_WAIT = 600.0
# Backoff between creates the server refused for want of a place (429) or while it
# drains (503): first, and longest.
_BACKOFF_FIRST = 1.0
_BACKOFF_MAX = 30.0

_TOKEN_REFUSED = (
    "a token in --ek would be written in plain text into the job's config.json, lock.json "
    "and every trial's result.json: pass --ek token_file=PATH, or set $ENDLESS_TOKEN or "
    "$ENDLESS_TOKEN_FILE"
)


class EndlessOptions(EnvironmentOptions):
    """The ``--ek`` options of the endless environment (unknown ones are errors)."""

    url: str | None = None
    token_file: str | None = None
    # Declared only to refuse it with a message that names the alternatives.
    token: str | None = None

    @field_validator("token")
    @classmethod
    def _refuse_token(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError(_TOKEN_REFUSED)
        return value


class SandboxError(RuntimeError):
    """The endless server refused or failed a sandbox request (status and its message)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"endless serve answered {status}: {message}")
        self.status = status
        self.message = message


def _token(kwargs: dict[str, Any]) -> str | None:
    path = kwargs.get("token_file") or None
    if path is None and os.environ.get("ENDLESS_TOKEN"):
        return os.environ["ENDLESS_TOKEN"].strip()
    path = path or os.environ.get("ENDLESS_TOKEN_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    return line.strip()
    return None


def _tar_dir(source: Path) -> bytes:
    """A tar of ``source``'s content (names relative to it)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for child in sorted(source.iterdir()):
            tf.add(child, arcname=child.name)
    return buf.getvalue()


def _tar_file(source: Path, name: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(source, arcname=name)
    return buf.getvalue()


def _error_text(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except (ValueError, AttributeError):
        return response.text


class EndlessEnvironment(BaseEnvironment):
    """A Harbor environment whose container is an endless sandbox (see the module docs)."""

    options_model = EndlessOptions

    def __init__(self, *args: Any, **kwargs: Any):
        self._sandbox_id: str | None = None
        self._client: httpx.AsyncClient | None = None
        super().__init__(*args, **kwargs)
        ours = self.options.model_dump() if self.options is not None else {}
        self._url = base_url(ours.get("url"))
        self._auth = _token(ours)

    @staticmethod
    def type() -> str:
        return "endless"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # A sandbox has the network or none (no allowlist): a no-network policy is
        # enforced as asked.
        return EnvironmentCapabilities(disable_internet=True)

    @classmethod
    def preflight(cls, kwargs: dict[str, Any] | None = None) -> None:
        kwargs = dict(kwargs or {})
        super().preflight(kwargs)
        url = base_url(kwargs.get("url"))
        try:
            health = httpx.get(f"{url}/v1/health", headers=cls._headers(_token(kwargs)), timeout=10)
        except httpx.HTTPError as e:
            raise SystemExit(f"endless serve is not reachable at {url} ({e}); start it with "
                             "`endless serve` and set $ENDLESS_URL or --ek url=...") from None
        if health.status_code == 401:
            raise SystemExit(f"endless serve at {url} refused the token: set $ENDLESS_TOKEN, "
                             "$ENDLESS_TOKEN_FILE or --ek token_file=...")

    def _validate_definition(self) -> None:
        dockerfile = self.environment_dir / "Dockerfile"
        if not dockerfile.is_file() and not self.task_env_config.docker_image:
            raise FileNotFoundError(
                f"{dockerfile} not found and the task names no docker_image: endless builds "
                "a sandbox from one of them")

    # -- HTTP ---------------------------------------------------------------------------

    @staticmethod
    def _headers(token: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self._url, headers=self._headers(self._auth))
        return self._client

    async def _call(self, method: str, path: str, timeout: float, **kw: Any) -> httpx.Response:
        response = await self._http().request(method, path, timeout=timeout, **kw)
        if response.status_code >= 400:
            raise SandboxError(response.status_code, _error_text(response))
        return response

    def _path(self, suffix: str = "") -> str:
        if self._sandbox_id is None:
            raise RuntimeError("the endless sandbox is not started")
        return f"/v1/sandboxes/{self._sandbox_id}{suffix}"

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, force_build: bool) -> None:
        cfg = self.task_env_config
        body: dict[str, Any] = {}
        has_dockerfile = (self.environment_dir / "Dockerfile").is_file()
        if self.environment_dir.is_dir():
            archive = _tar_dir(self.environment_dir)
            body["environment"] = base64.b64encode(archive).decode("ascii")
        if cfg.docker_image and not has_dockerfile:
            body["image"] = cfg.docker_image
        if cfg.workdir:
            body["workdir"] = cfg.workdir
        if cfg.cpus:
            body["cpus"] = float(cfg.cpus)
        if cfg.memory_mb:
            body["memory_mb"] = int(cfg.memory_mb)
        if cfg.storage_mb:
            body["storage_mb"] = int(cfg.storage_mb)
        if self.network_policy.network_mode == NetworkMode.PUBLIC:
            body["network"] = True
        created = await self._create(body)
        self._sandbox_id = created["sandbox_id"]
        self.logger.debug(f"endless sandbox {self._sandbox_id} from {created.get('source')}")
        paths = EnvironmentPaths.for_os(self.os)
        await self.ensure_dirs([paths.agent_dir, paths.verifier_dir, paths.artifacts_dir])
        await self._upload_environment_dir_after_start()

    async def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the sandbox: the server queues the create while it runs its maximum of
        sandboxes; one it refuses anyway (429: the line is full or the wait ran out; 503:
        it drains) is retried with backoff until ``_CREATE_TIMEOUT``."""
        deadline = time.monotonic() + _CREATE_TIMEOUT
        pause = _BACKOFF_FIRST
        while True:
            try:
                response = await self._call("POST", "/v1/sandboxes", _CREATE_TIMEOUT,
                                            params={"wait": _CREATE_WAIT}, json=body)
                return response.json()
            except SandboxError as e:
                if e.status not in (429, 503) or time.monotonic() + pause > deadline:
                    raise
                self.logger.debug(f"endless serve answered {e.status}; retrying in {pause:.0f} s")
            await asyncio.sleep(pause)
            pause = min(pause * 2, _BACKOFF_MAX)

    async def stop(self, delete: bool) -> None:
        # A sandbox lives in its server only: kept (--no-delete), it stays there until
        # the server's idle timeout.
        try:
            if self._sandbox_id is not None and not delete:
                self.logger.info(f"keeping endless sandbox {self._sandbox_id} at {self._url} "
                                 "(--no-delete): the server deletes it after its --idle-timeout")
                self._sandbox_id = None
            if self._sandbox_id is not None:
                try:
                    await self._call("DELETE", self._path(), 120)
                except SandboxError as e:
                    if e.status != 404:
                        raise
                self._sandbox_id = None
        finally:
            if self._client is not None:
                await self._client.aclose()
                self._client = None

    # -- commands -----------------------------------------------------------------------

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        body: dict[str, Any] = {"command": command}
        cwd = cwd or self.task_env_config.workdir
        if cwd:
            body["cwd"] = cwd
        merged = self._merge_env(env)
        if merged:
            body["env"] = merged
        resolved = self._resolve_user(user)
        if resolved is not None:
            body["user"] = resolved
        if timeout_sec is not None:
            body["timeout_sec"] = float(timeout_sec)
        limit = (float(timeout_sec) if timeout_sec else _DEFAULT_EXEC_TIMEOUT) + _SLACK
        out: dict[str, list[str]] = {"stdout": [], "stderr": []}
        last: dict[str, Any] = {}
        emit = self._output_callback()
        async with self._http().stream("POST", self._path("/exec"), json=body, timeout=limit) as response:
            if response.status_code >= 400:
                await response.aread()
                raise SandboxError(response.status_code, _error_text(response))
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                item = json.loads(line)
                stream = item.get("stream")
                if stream in out:
                    out[stream].append(item["data"])
                    if emit is not None:
                        await emit(item["data"], stream)
                else:
                    last = item
        if last.get("timed_out"):
            raise TimeoutError(f"the command ran past its {timeout_sec} s limit in the endless sandbox: "
                               f"{command[:200]}")
        code = last.get("exit_code")
        return ExecResult(stdout="".join(out["stdout"]), stderr="".join(out["stderr"]),
                          return_code=code if code is not None else -1)

    # -- files --------------------------------------------------------------------------

    async def _put(self, target_dir: str, archive: bytes) -> None:
        await self._call("PUT", self._path("/files"), 600 + _SLACK, params={"path": target_dir},
                         content=archive, headers={"Content-Type": "application/x-tar"})

    async def _get(self, source: str) -> bytes:
        response = await self._call("GET", self._path("/files"), 600 + _SLACK, params={"path": source})
        return response.content

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = posixpath.normpath(str(target_path))
        await self._put(posixpath.dirname(target) or "/",
                        _tar_file(Path(source_path), posixpath.basename(target)))

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._put(str(target_dir), _tar_dir(Path(source_dir)))

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        archive = await self._get(str(source_path))
        target = Path(target_path)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tf:
            members = [m for m in tf.getmembers() if m.isfile()]
            if len(members) != 1:
                raise SandboxError(500, f"{source_path} is not one regular file in the sandbox")
            src = tf.extractfile(members[0])
            assert src is not None
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        archive = await self._get(str(source_dir))
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tf:
            # The data filter refuses absolute paths, `..` and links out of target.
            tf.extractall(path=target, filter=_transfer_filter)


def _transfer_filter(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
    """``tarfile.data_filter``, skipping FIFOs and devices (as Harbor's own transfers do)."""
    if member.isdev():
        return None
    return tarfile.data_filter(member, dest_path)
