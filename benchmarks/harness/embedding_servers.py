"""Embedding servers side by side: Fractal's ``POST /v1/embeddings`` and Infinity's
``POST /embeddings`` (:mod:`benchmarks.harness.infinity_server`) in the same wrk cells.

Each server runs alone, one after the other, on the same cores, and answers the same requests: an
OpenAI-style body whose ``input`` is a list of ``texts`` consecutive query texts
(:func:`benchmarks.harness.live_load.openai_workload`), at ``connections`` open connections, for
each cell ``TEXTSxCONNECTIONS`` of ``embedding_cells`` (``1x8``: one text a request, eight
connections). The servers:

- Fractal on the served bundle, on an empty index (an embedding request never reads it);
- Fractal on ``--fp32-bundle`` when given (the fp32 model beside an int8 twin);
- Infinity on the raw all-MiniLM-L6-v2 weights that the bundles' backbone was exported from,
  with each of its engines in ``infinity_engines`` that starts (ONNX Runtime, torch), its
  batches at most ``infinity_batch`` texts; unless ``--infinity no``. Fractal is compared with
  Infinity's fastest engine in each cell.

Fractal's bundles add the trained head on top of the backbone: they do a little more work per
text than Infinity does. Each cell records requests and texts a second, p50/p99 latency, and
the server process's CPU per request (all its threads, ``/proc``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.infinity_server import (
    ENGINES,
    SERVED_MODEL,
    InfinityModel,
    infinity_binary,
    start_infinity,
)
from benchmarks.harness.live_load import (
    SERVICE_CPUS,
    WrkSettings,
    generator_cell,
    openai_workload,
)
from benchmarks.harness.markdown import markdown_table
from benchmarks.harness.processes import MissingBinary, ProcessFailed, start_service
from benchmarks.harness.runner import Progress, option, yes_no
from bundle import load_bundle
from client import FractalClient


@dataclass(frozen=True)
class EmbeddingServerSettings(WrkSettings):
    """The embedding servers side by side: which, in which cells, and the target."""

    embedding_cells: tuple[str, ...] = option(
        ("1x1", "1x8", "1x32", "32x4"),
        "embedding servers side by side: TEXTSxCONNECTIONS cells",
    )
    fp32_bundle: Path | None = option(
        None, "an fp32 bundle measured beside the served one in the embedding-server cells"
    )
    infinity: bool = option(True, "Infinity in the embedding-server cells: yes or no", parse=yes_no)
    infinity_binary: Path | None = option(
        None, "Infinity's infinity_emb command (default: .venv-infinity/bin, then the PATH)"
    )
    infinity_engines: tuple[str, ...] = option(ENGINES, "Infinity's engines, each measured")
    infinity_batch: int = 32
    """Infinity's ``--batch-size``: at most this many texts a model call."""
    target_over_infinity: float = 2.0
    """Fractal fp32 requests a second over Infinity's, in every cell."""


@dataclass(frozen=True)
class Cell:
    """Texts per request and open connections."""

    texts: int
    connections: int

    @classmethod
    def parse(cls, text: str) -> Cell:
        """``"32x4"`` → 32 texts a request at 4 connections."""
        try:
            texts, connections = (int(part) for part in text.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--embedding-cells: {text!r} is not TEXTSxCONNECTIONS") from None
        if texts < 1 or connections < 1:
            raise SystemExit(f"--embedding-cells: {text!r} needs positive numbers")
        return cls(texts, connections)


@dataclass(frozen=True)
class Server:
    """One embedding server under test: its label, URL, process and the request it answers."""

    label: str
    precision: str
    base_url: str
    pid: int
    model: str
    path: str


def bundle_precision(bundle: Path) -> str:
    """``int8`` for a quantized twin (its manifest says how), else ``fp32``."""
    return "fp32" if load_bundle(bundle).quantization is None else "int8"


def batches(queries: Sequence[str], texts: int) -> dict[str, list[str]]:
    """Per query text, the ``texts`` query texts from it on (cycling), its request's input."""
    n = len(queries)
    return {query: [queries[(i + j) % n] for j in range(texts)] for i, query in enumerate(queries)}


def measure(
    server: Server,
    cells: Sequence[Cell],
    queries: Sequence[str],
    settings: WrkSettings,
    generator: str,
    progress: Progress,
) -> list[dict]:
    """Every cell on ``server``."""
    rows = []
    for cell in cells:
        workload = openai_workload(
            server.model, name=server.label, path=server.path, batches=batches(queries, cell.texts)
        )
        result = generator_cell(
            server.base_url, workload, queries, cell.connections, 0, settings, generator, server.pid
        )
        row = {
            "server": server.label,
            "precision": server.precision,
            "texts": cell.texts,
            "connections": cell.connections,
            "texts_per_second": result["qps"] * cell.texts,
            **result,
        }
        rows.append(row)
        progress(
            f"{server.label:>14} {cell.texts:>3} texts c={cell.connections:<3} "
            f"{row['qps']:7.1f} req/s  p50 {row['p50_ms'] or 0:.1f}  "
            f"p99 {row['p99_ms'] or 0:.1f} ms  failed {row['failed']}"
        )
    return rows


def fractal_rows(
    bundle: Path,
    cells: Sequence[Cell],
    queries: Sequence[str],
    settings: WrkSettings,
    generator: str,
    work: Path,
    progress: Progress,
) -> tuple[list[dict], dict]:
    """The cells on Fractal serving ``bundle`` with an empty index; the rows and its encoder
    (``/info``)."""
    precision = bundle_precision(bundle)
    folder = work / f"embedding-{precision}"
    process = start_service(
        bundle,
        folder / "index",
        work / f"embedding-{precision}.log",
        cpus=SERVICE_CPUS if settings.pin else None,
        **dict(settings.service),
    )
    try:
        with FractalClient(process.base_url) as client:
            info = client.info()
        server = Server(
            f"Fractal {precision}",
            precision,
            process.base_url,
            process.process.pid,
            info["model"],
            "/v1/embeddings",
        )
        return measure(server, cells, queries, settings, generator, progress), info["encoder"]
    finally:
        process.shut_down()


def infinity_rows(
    settings: EmbeddingServerSettings,
    cells: Sequence[Cell],
    queries: Sequence[str],
    generator: str,
    work: Path,
    progress: Progress,
) -> tuple[list[dict], dict]:
    """The cells on Infinity, one engine of ``infinity_engines`` after the other; the rows and
    what ran (per engine that did not, why), or no rows and why Infinity was not measured."""
    try:
        command = infinity_binary(settings.infinity_binary)
    except MissingBinary as error:
        progress(f"Infinity not measured: {error}")
        return [], {"measured": False, "why_not": str(error)}
    model = InfinityModel.prepare(work / "infinity")
    rows: list[dict] = []
    failures: dict[str, str] = {}
    for engine in settings.infinity_engines:
        progress(f"starting Infinity's {engine} engine ({command})")
        try:
            server = start_infinity(
                command,
                model,
                engine,
                work / "infinity",
                settings.infinity_batch,
                SERVICE_CPUS if settings.pin else None,
            )
        except ProcessFailed as error:
            progress(f"Infinity's {engine} engine not measured: {error}")
            failures[engine] = str(error)
            continue
        try:
            assert server.process is not None
            peer = Server(
                f"Infinity {engine}",
                "fp32",
                server.base_url,
                server.process.pid,
                SERVED_MODEL,
                "/embeddings",
            )
            rows += measure(peer, cells, queries, settings, generator, progress)
        finally:
            server.stop()
    about = {
        "measured": bool(rows),
        "command": command,
        "engines": [engine for engine in settings.infinity_engines if engine not in failures],
        "engines_that_did_not_start": failures,
        "batch_size": settings.infinity_batch,
        "threads": f"each engine's default: the {len(os.sched_getaffinity(0))} CPUs it may use",
    }
    if not rows:
        about["why_not"] = f"no engine started: {failures}"
    return rows, about


def side_by_side(
    settings: EmbeddingServerSettings,
    queries: Sequence[str],
    generator: str,
    work: Path,
    progress: Progress,
) -> dict:
    """Every server of the module docstring in every cell, one server at a time; the rows, each
    Fractal's encoder, what ran as Infinity, and Fractal over Infinity per cell."""
    cells = [Cell.parse(text) for text in settings.embedding_cells]
    bundles = [settings.bundle]
    if settings.fp32_bundle is not None:
        if bundle_precision(settings.fp32_bundle) != "fp32":
            raise SystemExit(f"--fp32-bundle: {settings.fp32_bundle} is a quantized twin")
        if bundle_precision(settings.bundle) == "fp32":
            raise SystemExit(
                f"--fp32-bundle: the served bundle {settings.bundle} is fp32 already; "
                "leave --fp32-bundle out"
            )
        bundles.append(settings.fp32_bundle)
    rows, encoders = [], {}
    for bundle in bundles:
        found, encoder = fractal_rows(bundle, cells, queries, settings, generator, work, progress)
        rows += found
        encoders[found[0]["server"]] = encoder | {"bundle": str(bundle)}
    infinity: dict = {"measured": False, "why_not": "--infinity no"}
    if settings.infinity:
        found, infinity = infinity_rows(settings, cells, queries, generator, work, progress)
        rows += found
    return {
        "rows": rows,
        "fractal_encoders": encoders,
        "infinity": infinity,
        "over_infinity": {
            precision: over_infinity(rows, precision) for precision in ("fp32", "int8")
        },
    }


def over_infinity(rows: Sequence[dict], precision: str) -> dict[str, float]:
    """Per cell (``TEXTSxCONNECTIONS``), Fractal at ``precision`` over Infinity's fastest
    engine in that cell, in requests a second; empty when either was not measured."""
    qps: dict[str, dict[str, float]] = {}
    for row in rows:
        cell = f"{row['texts']}x{row['connections']}"
        side = "infinity" if row["server"].startswith("Infinity") else row["precision"]
        found = qps.setdefault(cell, {})
        found[side] = max(found.get(side, 0.0), row["qps"])
    return {
        cell: found[precision] / found["infinity"]
        for cell, found in qps.items()
        if precision in found and found.get("infinity")
    }


def target(report: dict, settings: EmbeddingServerSettings) -> dict:
    """Fractal fp32 at least ``target_over_infinity`` × Infinity in every cell."""
    ratios = report["over_infinity"]["fp32"]
    wanted = f"Fractal fp32 /v1/embeddings ≥ {settings.target_over_infinity}× Infinity's req/s"
    if not ratios:
        why = report["infinity"].get("why_not") or "no fp32 bundle was served"
        return {
            "target": wanted + " in every cell",
            "reached": f"not measured: {why}",
            "met": False,
        }
    cells = [Cell.parse(text) for text in settings.embedding_cells]
    smallest = min(ratios.values())
    return {
        "target": wanted + f" in every cell ({', '.join(map(str, ratios))})",
        "reached": round(smallest, 2),
        "at_cells": len(ratios),
        "met": len(ratios) == len(cells) and smallest >= settings.target_over_infinity,
    }


def markdown_section(report: dict) -> str:
    """The side-by-side table: per cell, each server's req/s and p50 / p99, and the ratios."""
    rows = report["rows"]
    servers = list(dict.fromkeys(row["server"] for row in rows))
    cells = list(dict.fromkeys((row["texts"], row["connections"]) for row in rows))
    ratio_names = [p for p in ("fp32", "int8") if report["over_infinity"][p]]
    table = []
    for texts, connections in cells:
        line: list[object] = [f"{texts} text{'s' * (texts > 1)}, c={connections}"]
        for server in servers:
            row = next(
                (
                    r
                    for r in rows
                    if (r["server"], r["texts"], r["connections"]) == (server, texts, connections)
                ),
                None,
            )
            line.append(
                "–"
                if row is None
                else f"{row['qps']:,.1f} ({row['p50_ms'] or 0:.1f} / {row['p99_ms'] or 0:.1f})"
            )
        cell = f"{texts}x{connections}"
        line += [f"{report['over_infinity'][p].get(cell, float('nan')):.2f}×" for p in ratio_names]
        table.append(line)
    infinity = report["infinity"]
    about = (
        f"Infinity's engines measured: {', '.join(infinity['engines'])} (batches of at most "
        f"{infinity['batch_size']} texts, {infinity['threads']}); engines that did not start or "
        f"answered other embeddings: {infinity['engines_that_did_not_start'] or 'none'}. The "
        "ratios are over Infinity's fastest engine in each cell."
        if infinity["measured"]
        else f"Infinity was not measured: {infinity['why_not']}."
    )
    encoders = "; ".join(
        f"{name}: {encoder['threads']} encoder threads, bundle `{encoder['bundle']}`"
        for name, encoder in report["fractal_encoders"].items()
    )
    return (
        "## Embedding servers side by side\n\nThe same OpenAI-style request (an `input` list of "
        "query texts) to each server in turn, alone on the same cores: Fractal's "
        "`/v1/embeddings` (empty index) and Infinity's `/embeddings` on the raw "
        "all-MiniLM-L6-v2 weights (Fractal adds its trained head). Requests a second "
        f"(p50 / p99 ms). {about} {encoders}.\n\n"
        + markdown_table(
            ["cell", *servers, *(f"Fractal {p} / Infinity" for p in ratio_names)], table
        )
    )
