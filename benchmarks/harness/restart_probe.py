"""A restart in a fresh process: open a collection folder (or read a FAISS index file), and say
how long that took and how much anonymous memory it added.

    python -m benchmarks.harness.restart_probe SPEC_JSON

``SPEC_JSON`` is ``{"kind": "collection", "path", "dim", "prefix_dims", "layout", "hnsw",
"full_dtype", "queries", "searches"}`` or ``{"kind": "faiss", "path", "queries", "ef_search"}``.
The probe imports everything first and reads ``RssAnon`` (``/proc/self/status``); then opens the
folder or file (the timed restart) and reads it again; then runs every query once per entry of
``searches`` (``{"dim", "kind"}`` for a plain search, ``{"shortlist_dim", "factor"}`` for C2F) and
reads it a third time, with ``RssFile`` beside it (mapped file pages, which the kernel can drop).
It prints one JSON line. :func:`probe` runs it and parses that line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import faiss
import numpy as np

from index import Collection, HnswParams

K = 10


def status_kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``RssAnon``, ``RssFile``…), in KiB."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _open(spec: dict) -> tuple[object, dict]:
    """The opened collection or index, and what opening it reports."""
    if spec["kind"] == "faiss":
        index = faiss.read_index(spec["path"])
        faiss.downcast_index(index).hnsw.efSearch = spec["ef_search"]
        return index, {}
    collection = Collection(
        spec["path"],
        dim=spec["dim"],
        prefix_dims=spec["prefix_dims"],
        index_kinds=("hnsw",),
        hnsw=HnswParams(**spec["hnsw"]),
        layout={int(dim): kinds for dim, kinds in spec["layout"].items()},
        full_dtype=spec["full_dtype"],
    )
    return collection, {"recovery": collection.stats().recovery.as_dict()}


def _search(opened: object, spec: dict, queries: np.ndarray) -> None:
    if spec["kind"] == "faiss":
        opened.search(queries, K)  # type: ignore[attr-defined]
        return
    for search in spec["searches"]:
        for row in range(len(queries)):
            query = queries[row : row + 1]
            if "factor" in search:
                opened.search_c2f(query, K, search["shortlist_dim"], search["factor"], kind="hnsw")
            else:
                opened.search(query, K, search["dim"], kind=search["kind"])


def main(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    faiss.omp_set_num_threads(1)
    queries = np.load(spec["queries"])
    before = status_kib("RssAnon")
    started = time.perf_counter()
    opened, extra = _open(spec)
    open_seconds = time.perf_counter() - started
    opened_kib = status_kib("RssAnon")
    _search(opened, spec, queries)
    result = {
        "open_seconds": open_seconds,
        "rss_anon_before_bytes": before * 1024,
        "rss_anon_opened_bytes": opened_kib * 1024,
        "rss_anon_searched_bytes": status_kib("RssAnon") * 1024,
        "rss_file_searched_bytes": status_kib("RssFile") * 1024,
        **extra,
    }
    print(json.dumps(result, default=str))


def probe(spec: dict) -> dict:
    """Run the probe in a fresh Python process; its report."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.harness.restart_probe", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"restart probe failed ({completed.returncode}): {completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main(sys.argv[1:])
