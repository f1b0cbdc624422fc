"""``fractal embed --ray``: the same shards, with the batches encoded by Ray Data actors.

:func:`bulk.embed.embed_corpus` plans, resumes, checks and writes the shards exactly as it does
on one machine; :class:`RayEncoders` only replaces who encodes a shard's batches
(:class:`bulk.embed.Encoders`). The shard's token batches, the very ones the worker processes
would get, become the rows of a Ray Dataset, one batch per row and per block, and
``map_batches`` sends each to :class:`EncoderActor`, an actor pool of ``actors`` actors of one
CPU each, each holding one :class:`encoding.encoder.OnnxEncoder` on one intra-op thread. An actor
returns the batch's float32 vectors as raw bytes, and the driver puts them at the batch's
positions, so the shards are bit for bit those of the single-machine path. One Dataset runs per
shard: the shard stays the unit of work and of resuming, and the driver holds one shard's texts
at a time; the actors (a second or two to start) are started anew for each shard, which the
default 50,000 rows a shard amortise.

The bundle is shipped **once per node**. The driver reads the files the encoder needs
(``encoder.onnx``, ``tokenizer.json``) once and puts them into Ray's object store once
(``ray.put``). Each actor looks for the node's copy, a folder named by the bundle's content hash
under the node's temporary folder (``$TMPDIR/fractal-bundles/<hash>``). The first actor of a
node to miss it takes a file lock, fetches the files from the object store (Ray moves an
object to a node once, whatever number of actors there read it), checks them against the
manifest's sha256, writes them under a temporary name and renames the folder into place; the
other actors of the node wait on the lock, then find the folder and never fetch the files. The
folder is a cache keyed by content, so a later run with the same bundle reuses it; delete it
freely.

``address`` ``"local"`` (``fractal embed --ray``) starts a new local cluster with one CPU per
actor and shuts it down at the end; any other address (``host:6379``, ``ray://host:10001``,
``auto``) connects to a running cluster and disconnects at the end. The connection is made on
the first shard that needs encoding, so a rerun with every shard done starts nothing. A process
already connected to Ray (a notebook, a test) uses its connection and keeps it. Ray's and Ray
Data's console lines and progress bars are kept off (its logs stay in the session folder,
``/tmp/ray/session_latest/logs``): the progress bar is ``fractal embed``'s own. The cluster's
nodes need Fractal and its dependencies installed, as for any Ray program (a local cluster
shares this environment).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import socket
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray
import ray.data

from bulk.embed import Job
from bulk.errors import BulkError
from bundle import ENCODER_FILE, TOKENIZER_FILE, Manifest
from encoding.cores import available_cores
from encoding.encoder import OnnxEncoder
from encoding.length_batches import DEFAULT_BATCH_TOKENS

logger = logging.getLogger(__name__)

LOCAL = "local"
"""The address that starts a new local cluster (Ray's own meaning of ``address="local"``)."""
SHIPPED_FILES = (ENCODER_FILE, TOKENIZER_FILE)
"""What an actor needs of the bundle: the graph and the tokenizer."""
NODE_CACHE = "fractal-bundles"
"""The folder, under a node's temporary folder, of its bundle copies."""
CONNECT_TIMEOUT_S = 10.0
"""How long a ``host:port`` address may take to accept a TCP connection (Ray itself retries
an unreachable address for many minutes)."""
RAY_LOGS = "/tmp/ray/session_latest/logs"
"""Where a node keeps Ray's logs (Ray Data's included), which an error message points to."""

BundleFiles = dict[str, bytes]
"""File name → content: what the driver puts into the object store."""


def _check_reachable(address: str) -> None:
    """A :class:`BulkError` when nothing accepts a connection at a ``[ray://]host:port``
    address; other forms (``auto``) are left to Ray."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not (colon and port.isdigit()):
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise BulkError(f"--ray {address}: no Ray cluster answers there ({exc})") from None


LOCAL_START_TRIES = 2
"""Ray waits 30 s for a new node's raylet to register; a first start on a cold, busy machine
(a fresh virtualenv) can take longer, and the second try finds its files cached."""


def _start_local(cpus: int, options: dict) -> None:
    """Start a local Ray node with ``cpus`` CPUs, trying again once if it does not come up in
    time (Ray raises a bare ``Exception`` for that, turned into a ``RuntimeError`` here)."""
    for attempt in range(1, LOCAL_START_TRIES + 1):
        try:
            ray.init(address=LOCAL, num_cpus=cpus, include_dashboard=False, **options)
            return
        except Exception as exc:  # noqa: BLE001 - Ray's node start timeout is a bare Exception
            ray.shutdown()
            if "timed out during startup" not in str(exc):
                raise
            if attempt == LOCAL_START_TRIES:
                raise RuntimeError(f"the local Ray node did not start: {exc}") from None
            logger.warning("the local Ray node did not start in time; trying again")


@contextmanager
def cluster(address: str = LOCAL, cpus: int | None = None) -> Iterator[None]:
    """Connected to a Ray cluster for the block: a new local one with ``cpus`` CPUs (default one
    per core) when ``address`` is ``"local"``, else the one at ``address``; shut down or
    disconnected at the end. In a process already connected, that connection, left open."""
    if ray.is_initialized():
        yield
        return
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    try:
        if address == LOCAL:
            _start_local(cpus or available_cores(), quiet)
        else:
            _check_reachable(address)
            ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        ray.shutdown()
        raise BulkError(f"--ray {address}: cannot connect to the Ray cluster ({exc})") from None
    try:
        yield
    finally:
        ray.shutdown()


def node_copy(manifest: Manifest, fetch: Callable[[], BundleFiles], root: Path) -> Path:
    """The node's copy of the bundle's encoder files, ``root/<content hash>``: made by the first
    caller that misses it, under a file lock, from ``fetch()`` checked against the manifest's
    sha256 and renamed into place whole; found by every later caller, which never fetches."""
    folder = root / manifest.content_hash
    if folder.is_dir():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{manifest.content_hash}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if folder.is_dir():
            return folder
        work = Path(tempfile.mkdtemp(prefix=f".{manifest.content_hash[:12]}-", dir=root))
        try:
            for name, content in fetch().items():
                if hashlib.sha256(content).hexdigest() != manifest.files.get(name):
                    raise BulkError(
                        f"{name}: the copy that reached this node does not match the bundle's "
                        "sha256"
                    )
                with (work / name).open("wb") as handle:
                    handle.write(content)
                    handle.flush()
                    os.fsync(handle.fileno())
            work.rename(folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


class EncoderActor:
    """A Ray Data actor: one ONNX session on one intra-op thread, on the node's copy of the
    bundle, with the run's ``batch_tokens``; a batch of rows ``job``, ``texts`` → rows ``job``,
    ``vectors`` (the float32 vectors, row-major, as bytes)."""

    def __init__(
        self,
        manifest: Manifest,
        files: list[ray.ObjectRef],
        cache_root: str | None,
        batch_tokens: int,
    ) -> None:
        # ``files`` holds the reference in a list, so that Ray does not fetch it before this
        # runs: only the node's first actor does, and only when the node has no copy yet.
        root = Path(cache_root or tempfile.gettempdir()) / NODE_CACHE
        folder = node_copy(manifest, lambda: ray.get(files[0]), root)
        self._encoder = OnnxEncoder(folder, manifest, threads=1, batch_tokens=batch_tokens)

    def __call__(self, batch: pa.Table) -> pa.Table:
        vectors = [
            self._encoder.encode(texts).vectors.astype(np.float32, copy=False).tobytes()
            for texts in batch.column("texts").to_pylist()
        ]
        return pa.table({"job": batch.column("job"), "vectors": pa.array(vectors, pa.binary())})


@contextmanager
def _quiet_ray_data() -> Iterator[None]:
    """No Ray Data progress bars or console lines while a dataset runs (its log file in the
    session folder keeps them); the settings as they were afterwards."""
    context = ray.data.DataContext.get_current()
    settings = (context.enable_progress_bars, context.print_on_execution_start)
    consoles = [h for h in logging.getLogger("ray.data").handlers if h.name == "console"]
    levels = [handler.level for handler in consoles]
    context.enable_progress_bars = context.print_on_execution_start = False
    for handler in consoles:
        handler.setLevel(logging.CRITICAL)  # a failure is raised as one BulkError line
    try:
        yield
    finally:
        context.enable_progress_bars, context.print_on_execution_start = settings
        for handler, level in zip(consoles, levels, strict=True):
            handler.setLevel(level)


def _last_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


class RayEncoders:
    """:class:`bulk.embed.Encoders` on a Ray cluster (see the module docstring): ``actors``
    Ray Data actors (0: one per CPU of the cluster), on the cluster at ``address``. The
    connection is made and the bundle put into the object store on the first :meth:`encode`.
    ``cache_root`` is where nodes keep their copy (default: each node's temporary folder);
    ``batch_tokens`` is the actors' encoder budget (the run's, so that they run each job
    whole)."""

    def __init__(
        self,
        bundle_dir: Path,
        manifest: Manifest,
        address: str = LOCAL,
        actors: int = 0,
        cache_root: Path | None = None,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> None:
        self._bundle_dir = bundle_dir
        self._manifest = manifest
        self._address = address
        self._actors = actors
        self._cache_root = None if cache_root is None else str(cache_root)
        self._batch_tokens = batch_tokens
        self._connection = ExitStack()
        self._files: ray.ObjectRef | None = None

    def _start(self) -> ray.ObjectRef:
        if self._files is None:
            self._connection.enter_context(cluster(self._address, self._actors or None))
            if not self._actors:
                self._actors = max(1, int(ray.cluster_resources().get("CPU", 1)))
            files = {name: (self._bundle_dir / name).read_bytes() for name in SHIPPED_FILES}
            self._files = ray.put(files)
        return self._files

    def encode(
        self, jobs: Sequence[Job], done: Callable[[int], object]
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        files = self._start()
        rows = [{"job": number, "texts": texts} for number, (_, texts) in enumerate(jobs)]
        with warnings.catch_warnings():
            # Ray Data restarts a lost actor by default, which cannot work for its actors (their
            # constructor arguments live in the object store, ray-project/ray#53727) and has the
            # driver print an error line per actor (#57733). A lost actor fails the shard
            # instead; a rerun resumes there. Ray 2.60 deprecates passing max_restarts.
            warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
            dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
                EncoderActor,
                batch_size=1,
                batch_format="pyarrow",
                fn_constructor_kwargs={
                    "manifest": self._manifest,
                    "files": [files],
                    "cache_root": self._cache_root,
                    "batch_tokens": self._batch_tokens,
                },
                compute=ray.data.ActorPoolStrategy(size=min(self._actors, len(rows))),
                num_cpus=1,
                max_restarts=0,
            )
        try:
            with _quiet_ray_data():
                for row in dataset.iter_rows():
                    positions = jobs[row["job"]][0]
                    vectors = np.frombuffer(row["vectors"], np.float32)
                    yield positions, vectors.reshape(len(positions), self._manifest.dim)
                    done(len(positions))
        except ray.exceptions.RayError as exc:
            raise BulkError(
                f"encoding on the Ray cluster failed ({_last_line(exc)}; Ray's logs are in "
                f"{RAY_LOGS}); the shards written so far stay: rerun the same command to go on"
            ) from None

    def close(self) -> None:
        self._connection.close()
