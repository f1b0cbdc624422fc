"""Real server processes on free loopback ports: the Fractal service, ``redis-server`` and a
``milvus-lite`` server (the Milvus index backend's development engine).

    with live_service(bundle, index_dir, log, index_kinds="hnsw") as base_url:
        httpx.get(f"{base_url}/info")

Keyword settings become ``FRACTAL_*`` variables (``index_kinds`` → ``FRACTAL_INDEX_KINDS``); the
caller's other ``FRACTAL_*`` variables are dropped so that a run states every setting it uses.
Every wait is bounded in time; a process that exits while it is waited for is reported with
the tail of its log.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx
import redis

READY_TIMEOUT_S = 600.0
"""Opening a large index folder (snapshots checked against the store) can take minutes."""
STOP_TIMEOUT_S = 120.0
"""A graceful stop writes the index snapshots; a 100K-document HNSW graph takes a while."""
SERVER_START_TIMEOUT_S = 30.0
"""Redis (and the other small servers the tests run) answer within a second or two."""
ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the service process runs from here, so that it imports this tree's code."""
INSTALL = "apt-get install -y redis-server prometheus docker-compose wrk hey"
MILVUS_INSTALL = "pip install -e '.[scale]'"


class MissingBinary(RuntimeError):
    """A server binary the caller needs is not installed."""


class ProcessFailed(RuntimeError):
    """A process exited, or did not become ready, while it was being waited for."""


def find_binary(name: str, install: str = INSTALL) -> str:
    """The path of the binary ``name``; :class:`MissingBinary` naming the install command."""
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        raise MissingBinary(f"{name} is not installed; install it with: {install}")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(
    check: Callable[[], bool], what: str, timeout_s: float = SERVER_START_TIMEOUT_S
) -> None:
    """Poll ``check()`` until it is true; :class:`TimeoutError` naming ``what`` after
    ``timeout_s``. ``check`` may raise to stop the wait early (a process that died)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def log_tail(log: Path, chars: int = 2000) -> str:
    """The last ``chars`` characters of a log file (empty when there is none)."""
    if not log.is_file():
        return ""
    return log.read_text(encoding="utf-8", errors="replace")[-chars:]


def service_environment(
    bundle: Path, index_dir: Path, port: int, **settings: object
) -> dict[str, str]:
    """This process's environment without its ``FRACTAL_*`` variables, plus the service's
    bundle, index folder, loopback port, ``warning`` log level and ``settings``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("FRACTAL_")}
    env.update(
        FRACTAL_BUNDLE_DIR=str(bundle),
        FRACTAL_INDEX_DIR=str(index_dir),
        FRACTAL_HOST="127.0.0.1",
        FRACTAL_PORT=str(port),
        FRACTAL_LOG_LEVEL="warning",
    )
    env.update({f"FRACTAL_{name.upper()}": str(value) for name, value in settings.items()})
    return env


def is_ready(base_url: str, headers: dict[str, str] | None = None) -> bool:
    """Whether ``GET /ready`` answers 200 now (a refused or broken connection is a no)."""
    try:
        return httpx.get(f"{base_url}/ready", headers=headers, timeout=5.0).status_code == 200
    except httpx.TransportError:
        return False


@dataclass
class ServiceProcess:
    """A running ``python -m service`` process and where it listens."""

    process: subprocess.Popen
    base_url: str
    log: Path

    def client(self, timeout_s: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (graceful: in-flight requests finish, indexes are snapshotted); exit status.
        :class:`subprocess.TimeoutExpired` if it has not exited after ``timeout_s``."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs at all."""
        self.process.kill()
        self.process.wait(STOP_TIMEOUT_S)

    def shut_down(self) -> None:
        """Stop gracefully if it still runs; SIGKILL when the graceful stop takes too long."""
        if self.process.poll() is None:
            try:
                self.stop()
            except subprocess.TimeoutExpired:
                self.kill()

    def wait_ready(self, timeout_s: float, headers: dict[str, str] | None = None) -> None:
        """Until ``/ready`` answers 200; :class:`ProcessFailed` with the log's tail if the
        process exits first or is not ready within ``timeout_s`` (then it is killed)."""

        def ready() -> bool:
            if self.process.poll() is not None:
                raise ProcessFailed(
                    f"the service exited with status {self.process.returncode}:\n"
                    + log_tail(self.log)
                )
            return is_ready(self.base_url, headers)

        try:
            wait_until(ready, f"the service at {self.base_url} to be ready", timeout_s)
        except TimeoutError as error:
            self.kill()
            raise ProcessFailed(f"{error} (log: {self.log}):\n{log_tail(self.log)}") from None


def start_service(
    bundle: Path,
    index_dir: Path,
    log: Path,
    *,
    ready_timeout_s: float | None = READY_TIMEOUT_S,
    api_key: str | None = None,
    cpus: str | None = None,
    wrapper: Sequence[str] = (),
    **settings: object,
) -> ServiceProcess:
    """Start ``python -m service`` on a free loopback port with ``settings`` (see
    :func:`service_environment`), its output appended to ``log``, and wait until ``/ready``
    answers 200 (asked with ``api_key`` as a bearer token, when the service requires one);
    with ``ready_timeout_s=None`` it returns at once, the process still starting.
    With ``cpus`` (a ``taskset`` CPU list, ``"0"``) it runs on those CPUs only; ``wrapper`` is a
    command that runs it (``nsenter …``: in another mount namespace). Both ``exec`` the service,
    so that the process id is the service's and signals reach it."""
    port = free_port()
    env = service_environment(bundle, index_dir, port, **settings)
    pinned = [] if cpus is None else [find_binary("taskset"), "--cpu-list", cpus]
    command = [*pinned, *wrapper, sys.executable, "-m", "service"]
    with log.open("ab") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=output)
    service = ServiceProcess(process, f"http://127.0.0.1:{port}", log)
    if ready_timeout_s is not None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        service.wait_ready(ready_timeout_s, headers)
    return service


@contextmanager
def live_service(bundle: Path, index_dir: Path, log: Path, **settings: Any) -> Iterator[str]:
    """Run the service until the block ends (SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``);
    yield its base URL once ``/ready`` answers 200. Its output goes to ``log``."""
    service = start_service(bundle, index_dir, log, **settings)
    try:
        yield service.base_url
    finally:
        service.shut_down()


@dataclass
class LoopbackServer:
    """A server process on 127.0.0.1:``port`` with its files and log in ``directory``;
    restartable on that port. Subclasses say how to start it and when it answers."""

    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    environment: dict[str, str] = field(default_factory=dict)
    """Variables added to the server's environment (``OMP_NUM_THREADS``: milvus-lite's FAISS
    threads)."""
    working_dir: Path | None = None
    """The folder it starts in (None: this process's)."""
    NAME: ClassVar[str] = "server"

    @property
    def log(self) -> Path:
        return self.directory / f"{self.NAME}.log"

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _ping(self) -> bool:
        raise NotImplementedError

    def start(self, timeout_s: float = SERVER_START_TIMEOUT_S) -> None:
        """Start it and wait until it answers; :class:`MissingBinary` when not installed."""
        command = self._command()
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                command,
                stdout=output,
                stderr=output,
                env=os.environ | self.environment,
                cwd=self.working_dir,
            )
        wait_until(self._answers, f"{self.NAME} on port {self.port}", timeout_s)

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise ProcessFailed(f"{self.NAME} exited: {log_tail(self.log)}")
        return self._ping()

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-conversation, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ten seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10.0)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class RedisServer(LoopbackServer):
    """``redis-server`` without persistence (it answers PING when ready)."""

    NAME: ClassVar[str] = "redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
        command = [find_binary("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1"]
        return command + ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]

    def _ping(self) -> bool:
        try:
            with redis.Redis(port=self.port, socket_timeout=1.0) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def pause(self) -> None:
        """SIGSTOP: Redis still accepts connections but answers nothing (a hung server)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5.0)


@dataclass
class MilvusServer(LoopbackServer):
    """``milvus-lite server`` (a Milvus-protocol gRPC server) on 127.0.0.1:``port`` with its data
    in ``directory/milvus``; restartable on that port with the same data (one process per data
    directory, as milvus-lite requires).

    It serves one request at a time (``--max-workers 1``). milvus-lite (3.2.2) opens a
    collection on the first request that names it, without a lock: after a restart, two
    concurrent first requests open it twice, each copy writing the same WAL file, and the
    writes acknowledged through the copy it drops are lost. Its requests take the GIL anyway.
    """

    NAME: ClassVar[str] = "milvus"

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        command = [find_binary("milvus-lite", MILVUS_INSTALL), "server"]
        command += ["--data-dir", str(self.directory / "milvus"), "--host", "127.0.0.1"]
        return command + ["--port", str(self.port), "--max-workers", "1"]

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                return True
        except OSError:
            return False
