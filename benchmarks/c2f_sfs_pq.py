"""Coarse-to-fine search, SFS scoring and product quantisation, at equal recall.

    python -m benchmarks c2f_sfs_pq                     # full run, about 20 min on 2 cores
    python -m benchmarks c2f_sfs_pq --smoke --out DIR   # seconds: toy vectors, tiny N

On the real V5 embeddings (every sentence of the data folder but the held-out queries) and on
100,000 synthetic vectors drawn to match them
(:class:`benchmarks.harness.search_data.GaussianMixture`),
with 1,000 held-out real queries, k = 10, one FAISS thread:

- **C2F**: shortlist ``k' = k × factor`` at the 64-d prefix (exact or HNSW index), re-rank
  exactly at 256-d; against Flat-256 and HNSW-256. recall@10 is against Flat-256.
- **SFS**: fragment-similarity scoring against plain cosine on the same index kind and
  dimension; each recall@10 against exact search with its own scoring.
- **PQ**: bytes per vector, recall@10 and latency, alone and with an exact 256-d re-rank of
  the PQ shortlist.

Two paths, named in every row:

- ``collection``: :class:`index.Collection`, the product's search path (SQLite store, the
  per-prefix indexes, C2F re-rank, SFS mapping, hits with string ids), built with the product's
  HNSW and PQ defaults. Its HNSW efSearch is fixed when the collection is built.
- ``raw``: the same FAISS index classes (:mod:`index.faiss_indexes`) called directly, for sweeps
  the collection cannot do (HNSW-256 over efSearch, PQ over sub-quantizer counts).

Both paths time the whole call from an unnormalised 256-d query (the prefix normalisation is
inside the timing), so a row of one path and a row of the other differ only by the collection's
own work (input checks, locking, id mapping). Writes ``c2f_sfs_pq{,_smoke}.{json,md,png}``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import cast

import faiss
import numpy as np
from matplotlib.figure import Figure

from benchmarks.harness.markdown import bullet_list, faster, markdown_table
from benchmarks.harness.runner import Progress, option
from benchmarks.harness.search_data import (
    GaussianMixture,
    head_embeddings,
    split_queries,
    toy_embeddings,
)
from benchmarks.harness.search_measure import (
    Case,
    Search,
    exact_neighbours,
    first_reaching,
    measure,
    recall_at_k,
)
from index import Collection, Hit, HnswParams, PqParams
from index.faiss_indexes import ExactIndex, HnswIndex, PqIndex
from index.fragments import fragment_unit
from index.vectors import prefix_unit

K = 10
TARGET_SPEEDUP = 3.0
"""C2F against flat-256 at equal recall."""
TARGET_SFS_RATIO = 1.1
"""SFS time over cosine time, same index."""


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    coarse_dim: int = 64
    dim: int = 256
    queries: int = 1000
    synthetic_n: int = option(100_000, "synthetic base size (0: real set only)")
    baseline: str | None = "mrl"
    """A second head whose real embeddings are searched too (its 64-d prefix is trained on the
    fine labels, V5's on the coarse ones); None: V5 only. Smoke runs have no heads."""
    factors: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    pq_rerank_factors: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    ef_values: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)
    hnsw: HnswParams = HnswParams()
    pq: PqParams = PqParams()
    pq_m_values: tuple[int, ...] = (8, 16, 32, 64)
    fragment_dim: int = 32
    clusters: int = 256
    rounds: int = 3
    c2f_target: float = 0.99
    recall_floors: tuple[float, ...] = (0.9, 0.95, 0.99)
    threads: int = option(1, "FAISS threads")
    seed: int = 0
    toy_vectors: bool = False
    """Toy clustered vectors stand in for the V5 embeddings (no encoder, no head)."""


SMOKE = Settings(
    toy_vectors=True, queries=40, synthetic_n=3000, factors=(1, 4, 16), pq_rerank_factors=(1, 4),
    ef_values=(16, 64), hnsw=HnswParams(ef_construction=40, ef_search=32), pq=PqParams(nbits=4),
    pq_m_values=(8, 16), clusters=16, rounds=1, baseline=None,
)


@dataclass(frozen=True)
class Entry:
    """One timed configuration: what it is (``info``), how to run it, and which exact search
    its recall is measured against."""

    info: dict
    search: Search
    truth: str


def found_ids(result: object) -> np.ndarray:
    """Row ids, ``(n, k)`` with -1 for missing, from a collection's hits or a FAISS result."""
    if isinstance(result, tuple):
        return result[1]
    hits = cast(list[list[Hit]], result)
    found = np.full((len(hits), K), -1, dtype=np.int64)
    for row, query_hits in zip(found, hits, strict=True):
        row[: len(query_hits)] = [int(hit.id) for hit in query_hits]
    return found


def build_collection(path: Path, base: np.ndarray, settings: Settings) -> Collection:
    """Cosine and SFS indexes (exact, HNSW, PQ) at the coarse and full dimension; document ids
    are the row numbers of ``base``."""
    collection = Collection(
        path,
        dim=settings.dim,
        prefix_dims=(settings.coarse_dim, settings.dim),
        index_kinds=("exact", "hnsw", "pq"),
        hnsw=settings.hnsw,
        pq=settings.pq,
        fragment_dim=settings.fragment_dim,
    )
    ids = [str(i) for i in range(len(base))]
    collection.upsert(ids, [""] * len(ids), base)
    return collection


KIND_LABELS = {"exact": "flat", "hnsw": "HNSW", "pq": "PQ"}


def label(row: dict) -> str:
    """A row's method as the tables show it, e.g. ``HNSW-256 SFS`` or ``C2F flat-64 → 256``."""
    index = f"{KIND_LABELS[row['kind']]}-{row['dim']}"
    if row["search"] == "plain":
        return index + (" SFS" if row["scoring"] == "sfs" else "")
    if row["dim"] == row["rerank_dim"]:
        return f"{index} + re-rank"
    return f"C2F {index} → {row['rerank_dim']}"


def collection_entries(collection: Collection, settings: Settings) -> list[Entry]:
    """Plain searches (cosine and SFS, flat and HNSW, 64 and 256-d; PQ-256), C2F from flat-64 and
    HNSW-64 over the shortlist factors, and PQ-256 with an exact re-rank."""
    coarse, full, ef = settings.coarse_dim, settings.dim, settings.hnsw.ef_search
    entries = []
    for scoring in ("cosine", "sfs"):
        for dim in (coarse, full):
            for kind in ("exact", "hnsw"):
                entries.append(
                    Entry(
                        {"search": "plain", "scoring": scoring, "kind": kind, "dim": dim}
                        | ({"ef_search": ef} if kind == "hnsw" else {}),
                        lambda q, d=dim, k=kind, s=scoring: collection.search(q, K, d, k, s).hits,
                        f"{scoring}-{dim}",
                    )
                )
    entries.append(
        Entry(
            {
                "search": "plain",
                "scoring": "cosine",
                "kind": "pq",
                "dim": full,
                "pq_m": settings.pq.m,
            },
            lambda q: collection.search(q, K, full, "pq").hits,
            f"cosine-{full}",
        )
    )
    shortlists = [("exact", coarse, f) for f in settings.factors]
    shortlists += [("hnsw", coarse, f) for f in settings.factors]
    shortlists += [("pq", full, f) for f in settings.pq_rerank_factors]
    for kind, dim, factor in shortlists:
        info = {
            "search": "c2f",
            "scoring": "cosine",
            "kind": kind,
            "dim": dim,
            "rerank_dim": full,
            "factor": factor,
            "shortlist": K * factor,
        }
        if kind == "hnsw":
            info["ef_search"] = max(ef, K * factor)
        if kind == "pq":
            info["pq_m"] = settings.pq.m
        entries.append(
            Entry(
                info,
                lambda q, k=kind, d=dim, f=factor: collection.search_c2f(q, K, d, f, k).hits,
                f"cosine-{full}",
            )
        )
    return [replace(entry, info={"path": "collection", **entry.info}) for entry in entries]


def raw_entries(base: np.ndarray, settings: Settings) -> tuple[list[Entry], dict]:
    """Flat-256, HNSW-256 over efSearch and PQ-256 over sub-quantizer counts, on the index
    classes of :mod:`index.faiss_indexes`; also the HNSW build time and the PQ sizes."""
    full = settings.dim
    ids = np.arange(len(base), dtype=np.int64)
    vectors = prefix_unit(base, full)
    flat = ExactIndex(full)
    flat.add(ids, vectors)
    searches: list[tuple[dict, Search]] = [
        ({"kind": "exact"}, lambda q: flat.search(prefix_unit(q, full), K))
    ]
    started = time.perf_counter()
    graph = faiss.IndexHNSWFlat(full, settings.hnsw.m, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = settings.hnsw.ef_construction
    shared = faiss.IndexIDMap2(graph)
    HnswIndex(full, settings.hnsw, shared).add(ids, vectors)
    sizes: dict = {"hnsw_build_s": time.perf_counter() - started, "pq": {}}
    for ef in settings.ef_values:
        hnsw = HnswIndex(full, replace(settings.hnsw, ef_search=ef), shared)
        searches.append(
            ({"kind": "hnsw", "ef_search": ef}, lambda q, h=hnsw: h.search(prefix_unit(q, full), K))
        )
    for m in settings.pq_m_values:
        params = replace(settings.pq, m=m)
        started = time.perf_counter()
        untrained = PqIndex(full, params)
        untrained.add(ids, vectors)
        pq = untrained.replacement() or untrained
        sizes["pq"][str(m)] = {
            "trained": pq.trained,
            "build_s": time.perf_counter() - started,
            "index_bytes_per_vector": pq.nbytes() / len(base),
        }
        searches.append(
            ({"kind": "pq", "pq_m": m}, lambda q, p=pq: p.search(prefix_unit(q, full), K))
        )
    common = {"path": "raw", "search": "plain", "scoring": "cosine", "dim": full}
    entries = [Entry(common | info, search, f"cosine-{full}") for info, search in searches]
    return entries, sizes


def truths(base: np.ndarray, queries: np.ndarray, settings: Settings) -> dict[str, np.ndarray]:
    """Exact top-k row ids per scoring and dimension."""
    result = {}
    for dim in (settings.coarse_dim, settings.dim):
        result[f"cosine-{dim}"] = exact_neighbours(
            prefix_unit(base, dim), prefix_unit(queries, dim), K
        )
        result[f"sfs-{dim}"] = exact_neighbours(
            fragment_unit(base, dim, settings.fragment_dim),
            fragment_unit(queries, dim, settings.fragment_dim),
            K,
        )
    return result


def run_dataset(
    name: str, base: np.ndarray, queries: np.ndarray, settings: Settings, work: Path
) -> dict:
    """Build both paths over ``base``, measure every entry in one round-robin, add verdicts.

    HNSW rows also count the distances FAISS computed per query (``faiss.cvar.hnsw_stats``),
    which, unlike time, the machine's load does not change. The query mappings of cosine and SFS
    are timed on their own too.
    """
    started = time.perf_counter()
    collection = build_collection(work / name, base, settings)
    collection_build_s = time.perf_counter() - started
    raw, sizes = raw_entries(base, settings)
    entries = collection_entries(collection, settings) + raw
    exact = truths(base, queries, settings)
    cases = {str(i): Case(entry.search, queries) for i, entry in enumerate(entries)}
    latencies = measure(cases, settings.rounds)
    rows = []
    for i, entry in enumerate(entries):
        faiss.cvar.hnsw_stats.reset()
        recall = recall_at_k(found_ids(entry.search(queries)), exact[entry.truth], K)
        row = entry.info | {"truth": f"exact {entry.truth}", "recall_at_10": recall}
        if entry.info["kind"] == "hnsw":
            row["distances_per_query"] = faiss.cvar.hnsw_stats.ndis / len(queries)
        rows.append(row | latencies[str(i)].to_json())
    full, fragment_dim = settings.dim, settings.fragment_dim
    mapping = measure(
        {
            "cosine": Case(lambda q: prefix_unit(q, full), queries),
            "sfs": Case(lambda q: fragment_unit(q, full, fragment_dim), queries),
        },
        settings.rounds,
    )
    stats = collection.stats()
    collection.close()
    return {
        "name": name,
        "n": len(base),
        "collection_build_s": collection_build_s,
        "collection_index_bytes": {index: info.bytes for index, info in stats.indexes.items()},
        "raw_sizes": sizes,
        "rows": rows,
        "query_mapping_p50_us": {name: latency.p50_us for name, latency in mapping.items()},
        "verdicts": verdicts(rows, settings),
    }


# -- verdicts ---------------------------------------------------------------------------------


def _pick(rows: Sequence[dict], **match: object) -> list[dict]:
    return [row for row in rows if all(row.get(key) == value for key, value in match.items())]


def verdicts(rows: Sequence[dict], settings: Settings) -> dict:
    """C2F against flat-256 and HNSW-256 at the recall target, and SFS against cosine."""
    coarse, full, target = settings.coarse_dim, settings.dim, settings.c2f_target
    plain = {"search": "plain", "scoring": "cosine", "dim": full}
    flat = _pick(rows, path="collection", kind="exact", **plain)[0]
    hnsw = {
        path: first_reaching(_pick(rows, path=path, kind="hnsw", **plain), target, "ef_search")
        for path in ("collection", "raw")
    }
    c2f = {}
    for kind in ("exact", "hnsw"):
        candidates = _pick(rows, search="c2f", kind=kind, dim=coarse)
        best = first_reaching(candidates, target, "factor")
        entry: dict = {"reached": best is not None}
        if best is None:
            entry["best_recall"] = max(row["recall_at_10"] for row in candidates)
            entry["best_factor"] = max(row["factor"] for row in candidates)
        else:
            entry |= {key: best[key] for key in ("factor", "recall_at_10", "p50_us", "batch_qps")}
            entry["speedup_vs_flat"] = flat["p50_us"] / best["p50_us"]
            entry["target_3x_met"] = entry["speedup_vs_flat"] >= TARGET_SPEEDUP
            ratios = {path: best["p50_us"] / row["p50_us"] for path, row in hnsw.items() if row}
            entry["time_vs_hnsw"] = ratios
            # Same path when the collection's HNSW reaches the target; else the raw HNSW, whose
            # time lacks the collection's own work, so the comparison leans against C2F.
            fair = ratios.get("collection", ratios.get("raw"))
            entry["not_slower_than_hnsw"] = None if fair is None else fair <= 1.0
        c2f[kind] = entry
    sfs = []
    for kind in ("exact", "hnsw"):
        for dim in (coarse, full):
            same = {"path": "collection", "search": "plain", "kind": kind, "dim": dim}
            cosine = _pick(rows, scoring="cosine", **same)[0]
            fragment = _pick(rows, scoring="sfs", **same)[0]
            ratio = fragment["p50_us"] / cosine["p50_us"]
            sfs.append(
                {
                    "kind": kind,
                    "dim": dim,
                    "cosine_p50_us": cosine["p50_us"],
                    "sfs_p50_us": fragment["p50_us"],
                    "p50_ratio": ratio,
                    "batch_ratio": cosine["batch_qps"] / fragment["batch_qps"],
                    "cosine_recall": cosine["recall_at_10"],
                    "sfs_recall": fragment["recall_at_10"],
                    "cosine_distances_per_query": cosine.get("distances_per_query"),
                    "sfs_distances_per_query": fragment.get("distances_per_query"),
                    "target_met": ratio <= TARGET_SFS_RATIO,
                }
            )
    return {
        "flat_p50_us": flat["p50_us"],
        "hnsw_at_target": hnsw,
        "c2f": c2f,
        "sfs": sfs,
        "at_recall_floors": at_recall_floors(rows, settings, flat["p50_us"]),
    }


def targets(datasets: Sequence[dict], recall: float) -> list[dict]:
    """Per data set, from its verdicts: C2F from each shortlist index at least
    ``TARGET_SPEEDUP`` × faster than flat-256 and not slower than HNSW-256 at recall@10 ≥
    ``recall``, and SFS within ``TARGET_SFS_RATIO`` × of cosine."""
    result = []
    for dataset in datasets:
        name, verdict = dataset["name"], dataset["verdicts"]
        for kind, entry in verdict["c2f"].items():
            what = f"{name}: C2F from a {'flat' if kind == 'exact' else 'HNSW'}-64 shortlist"
            result.append(
                {
                    "target": f"{what} ≥ {TARGET_SPEEDUP:g}× faster than flat-256 (p50) at "
                    f"recall@10 ≥ {recall}",
                    "reached": entry["speedup_vs_flat"] if entry["reached"] else
                    f"recall@10 ≥ {recall} not reached (best {entry['best_recall']:.3f})",
                    "met": bool(entry.get("target_3x_met")),
                }
            )
            if entry.get("not_slower_than_hnsw") is not None:
                ratios = entry["time_vs_hnsw"]
                result.append(
                    {
                        "target": f"{what} not slower than HNSW-256 at recall@10 ≥ {recall} "
                        "(time ratio ≤ 1)",
                        "reached": ratios.get("collection", ratios.get("raw")),
                        "met": entry["not_slower_than_hnsw"],
                    }
                )
        slowest = max(entry["p50_ratio"] for entry in verdict["sfs"])
        result.append(
            {
                "target": f"{name}: SFS / cosine p50 ≤ {TARGET_SFS_RATIO}× on every index",
                "reached": slowest,
                "met": slowest <= TARGET_SFS_RATIO,
            }
        )
    return result


def at_recall_floors(rows: Sequence[dict], settings: Settings, flat_p50_us: float) -> list[dict]:
    """For each way to search at 256-d and each recall floor, the cheapest setting reaching it."""
    plain = {"search": "plain", "scoring": "cosine", "dim": settings.dim}
    groups = {
        "C2F flat-64 → 256": (_pick(rows, search="c2f", kind="exact"), "factor"),
        "C2F HNSW-64 → 256": (_pick(rows, search="c2f", kind="hnsw"), "factor"),
        "PQ-256 + re-rank": (_pick(rows, search="c2f", kind="pq"), "factor"),
        "HNSW-256 (collection)": (
            _pick(rows, path="collection", kind="hnsw", **plain),
            "ef_search",
        ),
        "HNSW-256 (raw)": (_pick(rows, path="raw", kind="hnsw", **plain), "ef_search"),
    }
    result = []
    for method, (candidates, knob) in groups.items():
        for floor in settings.recall_floors:
            row = first_reaching(candidates, floor, knob)
            entry: dict = {"method": method, "floor": floor, "reached": row is not None}
            if row is not None:
                entry |= {
                    "setting": _knob(row),
                    "recall_at_10": row["recall_at_10"],
                    "p50_us": row["p50_us"],
                    "speedup_vs_flat": flat_p50_us / row["p50_us"],
                }
            result.append(entry)
    return result


# -- report -----------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _knob(row: dict) -> str:
    if row["search"] == "c2f":
        return f"k′ = {row['shortlist']}" + (
            f", ef {row['ef_search']}" if "ef_search" in row else ""
        )
    if "ef_search" in row:
        return f"ef {row['ef_search']}"
    if "pq_m" in row:
        return f"m {row['pq_m']}"
    return ""


def _c2f_table(rows: Sequence[dict], flat_p50: float, full: int) -> str:
    shown = [
        row
        for row in rows
        if row["scoring"] == "cosine"
        and row["kind"] != "pq"
        and (row["search"] == "c2f" or row["dim"] == full)
    ]
    return markdown_table(
        [
            "path",
            "method",
            "setting",
            "recall@10",
            "p50 µs",
            "p99 µs",
            "batch q/s",
            "speed-up vs flat-256 (collection)",
        ],
        [
            [
                row["path"],
                label(row),
                _knob(row),
                _f(row["recall_at_10"], 3),
                _f(row["p50_us"]),
                _f(row["p99_us"]),
                _f(row["batch_qps"], 0),
                f"{flat_p50 / row['p50_us']:.2f}×",
            ]
            for row in shown
        ],
    )


def _pq_table(dataset: dict, settings: dict) -> str:
    cells = []
    for row in dataset["rows"]:
        if row["kind"] != "pq":
            continue
        if row["path"] == "raw":
            index_bytes = dataset["raw_sizes"]["pq"][str(row["pq_m"])]["index_bytes_per_vector"]
        else:
            index_bytes = dataset["collection_index_bytes"][f"cosine-{row['dim']}-pq"]
            index_bytes /= dataset["n"]
        cells.append(
            [
                row["path"],
                label(row),
                _knob(row),
                _f(row["pq_m"] * settings["pq"]["nbits"] / 8, 0),
                _f(index_bytes),
                _f(row["recall_at_10"], 3),
                _f(row["p50_us"]),
                _f(row["p99_us"]),
                _f(row["batch_qps"], 0),
            ]
        )
    table = markdown_table(
        [
            "path",
            "method",
            "setting",
            "code bytes/vector",
            "index bytes/vector",
            "recall@10",
            "p50 µs",
            "p99 µs",
            "batch q/s",
        ],
        cells,
    )
    return (
        f"{table}\n\nA float32 256-d vector is 1,024 bytes (64-d: 256); index bytes are the "
        "serialised FAISS index (codes, codebooks, id map) per vector. The collection's re-rank "
        "reads the full unit vectors, which it keeps in memory whatever the index kind."
    )


def _floors_table(entries: Sequence[dict], floors: Sequence[float]) -> str:
    cells: dict[str, list[str]] = {}
    for entry in entries:
        cell = (
            f"{entry['setting']}: {entry['p50_us']:,.0f} µs ({entry['speedup_vs_flat']:.2f}×)"
            if entry["reached"]
            else "not reached"
        )
        cells.setdefault(entry["method"], []).append(cell)
    return markdown_table(
        ["method", *(f"recall@10 ≥ {floor}" for floor in floors)],
        [[method, *row] for method, row in cells.items()],
    )


def _sfs_table(entries: Sequence[dict]) -> str:
    headers = ["index", "dim", "cosine p50 µs", "SFS p50 µs", "SFS / cosine (p50)"]
    headers += ["SFS / cosine (batch)", "cosine recall@10", "SFS recall@10"]
    headers += ["cosine distances/query", "SFS distances/query", f"≤ {TARGET_SFS_RATIO}×"]
    cells = [
        [
            e["kind"],
            e["dim"],
            _f(e["cosine_p50_us"]),
            _f(e["sfs_p50_us"]),
            f"{e['p50_ratio']:.3f}×",
            f"{e['batch_ratio']:.3f}×",
            _f(e["cosine_recall"], 3),
            _f(e["sfs_recall"], 3),
            _f(e["cosine_distances_per_query"], 0),
            _f(e["sfs_distances_per_query"], 0),
            "yes" if e["target_met"] else "no",
        ]
        for e in entries
    ]
    return markdown_table(headers, cells)


def _c2f_verdict_lines(verdict: dict, target: float) -> str:
    lines = []
    for path, hnsw in verdict["hnsw_at_target"].items():
        lines.append(
            f"- HNSW-256 ({path} path) first reaches recall@10 ≥ {target} at ef "
            f"{hnsw['ef_search']} (recall {hnsw['recall_at_10']:.3f}, p50 "
            f"{hnsw['p50_us']:,.1f} µs)."
            if hnsw
            else f"- HNSW-256 ({path} path) does not reach recall@10 ≥ {target} at the efSearch "
            "values tried."
        )
    for kind, entry in verdict["c2f"].items():
        shortlist = "flat" if kind == "exact" else "HNSW"
        if not entry["reached"]:
            lines.append(
                f"- C2F from a {shortlist}-64 shortlist: recall@10 ≥ {target} **not reached** "
                f"(best {entry['best_recall']:.3f}, at k′ up to {K * entry['best_factor']}): "
                "targets **missed**."
            )
            continue
        line = (
            f"- C2F from a {shortlist}-64 shortlist reaches recall@10 "
            f"{entry['recall_at_10']:.3f} at k′ = {K * entry['factor']}, p50 "
            f"{entry['p50_us']:,.1f} µs: **{faster(entry['speedup_vs_flat'])} than "
            f"flat-256** (target ≥ {TARGET_SPEEDUP:g}×: "
            f"**{'met' if entry['target_3x_met'] else 'missed'}**)"
        )
        ratios = ", ".join(
            f"{ratio:.2f}× the time of {path} HNSW-256"
            for path, ratio in entry["time_vs_hnsw"].items()
        )
        if ratios:
            met = "met" if entry["not_slower_than_hnsw"] else "missed"
            line += f"; at equal recall {ratios} (not slower: **{met}**)"
        lines.append(line + ".")
    return "\n".join(lines)


def markdown(report: dict) -> str:
    settings = report["settings"]
    target = settings["c2f_target"]
    hnsw = settings["hnsw"]
    parts = [
        f"# C2F, SFS and PQ{' (smoke run)' if report['smoke'] else ''}",
        f"Measured by `{report['command']}`. k = 10; one query per call for p50/p99, "
        f"one call with all {settings['queries']:,} queries for batch throughput; "
        f"{settings['threads']} FAISS thread(s); {settings['rounds']} interleaved rounds. "
        "`collection` rows go through `index.Collection` (the product path: input checks, "
        "normalisation, lock, C2F re-rank, string ids); `raw` rows call the same FAISS index "
        "classes (`index.faiss_indexes`) directly, from the same unnormalised query "
        f"(normalisation timed too). HNSW: M {hnsw['m']}, efConstruction "
        f"{hnsw['ef_construction']}; the collection searches at ef {hnsw['ef_search']} (for a "
        "shortlist k′ > ef FAISS searches at ef = k′). C2F is compared with HNSW-256 on the "
        "collection path where the collection's HNSW reaches the recall target, otherwise "
        "with the raw HNSW-256, which does less work per query than any collection search. "
        "p99 includes any time the process was descheduled while other processes ran (see "
        "the load average).",
        "## Machine\n\n" + bullet_list(report["machine"]),
        "## Data\n\n" + bullet_list(report["data"]),
        "## Parameters\n\n" + bullet_list(settings),
    ]
    for dataset in report["datasets"]:
        verdict = dataset["verdicts"]
        sfs_max = max(entry["p50_ratio"] for entry in verdict["sfs"])
        mapping = dataset["query_mapping_p50_us"]
        parts += [
            f"## {dataset['name']}: N = {dataset['n']:,}",
            f"Collection build (12 indexes) {dataset['collection_build_s']:.0f} s; raw HNSW-256 "
            f"build {dataset['raw_sizes']['hnsw_build_s']:.0f} s.",
            "### C2F against flat-256 and HNSW-256 (recall@10 against flat-256)\n\n"
            + _c2f_verdict_lines(verdict, target)
            + "\n\nThe cheapest setting of each method reaching each recall floor: p50 and "
            "speed-up over flat-256 (collection).\n\n"
            + _floors_table(verdict["at_recall_floors"], settings["recall_floors"])
            + "\n\n"
            + _c2f_table(dataset["rows"], verdict["flat_p50_us"], settings["dim"]),
            f"### SFS against cosine (collection path, fragment {settings['fragment_dim']}-d)\n\n"
            f"Largest SFS / cosine p50 ratio: **{sfs_max:.3f}×** (target ≤ {TARGET_SFS_RATIO}×: "
            f"**{'met' if sfs_max <= TARGET_SFS_RATIO else 'missed'}**). SFS runs the same FAISS "
            "search over differently mapped vectors; its only extra work per query is the "
            f"mapping, p50 {mapping['sfs']:.1f} µs against {mapping['cosine']:.1f} µs for "
            "cosine's prefix normalisation (256-d). An HNSW graph built over SFS vectors is a "
            "different graph, so it may compute more or fewer distances per query. Each "
            "recall@10 is against exact search with the same scoring.\n\n"
            + _sfs_table(verdict["sfs"]),
            "### PQ (recall@10 against flat-256)\n\n" + _pq_table(dataset, settings),
        ]
    return "\n\n".join(parts)


def plot(report: dict, path: Path) -> None:
    datasets = report["datasets"]
    figure = Figure(figsize=(8 * len(datasets), 5.5))
    axes = figure.subplots(1, len(datasets), squeeze=False)
    full = report["settings"]["dim"]
    for axis, dataset in zip(axes[0], datasets, strict=True):
        rows = dataset["rows"]
        series = {
            "C2F flat-64 → 256": _pick(rows, search="c2f", kind="exact"),
            "C2F HNSW-64 → 256": _pick(rows, search="c2f", kind="hnsw"),
            "PQ-256 + re-rank": _pick(rows, search="c2f", kind="pq"),
            "HNSW-256 (raw, efSearch sweep)": _pick(rows, path="raw", kind="hnsw"),
            "PQ-256 (raw, m sweep)": _pick(rows, path="raw", kind="pq"),
        }
        for name, points in series.items():
            axis.plot(
                [r["p50_us"] for r in points],
                [r["recall_at_10"] for r in points],
                "o-",
                label=name,
                ms=4,
            )
        plain = {"search": "plain", "scoring": "cosine", "dim": full}
        for row, marker in (
            (_pick(rows, path="collection", kind="exact", **plain)[0], "s"),
            (_pick(rows, path="raw", kind="exact", **plain)[0], "D"),
            (_pick(rows, path="collection", kind="hnsw", **plain)[0], "^"),
        ):
            axis.plot(
                row["p50_us"],
                row["recall_at_10"],
                marker,
                ms=9,
                label=f"{label(row)} ({row['path']}{', ' + _knob(row) if _knob(row) else ''})",
            )
        axis.axhline(report["settings"]["c2f_target"], color="grey", lw=0.8, ls=":")
        axis.set(
            xscale="log",
            xlabel="p50 single-query latency (µs)",
            ylabel="recall@10 vs flat-256",
            title=f"{dataset['name']}, N = {dataset['n']:,}",
        )
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


# -- run --------------------------------------------------------------------------------------


def run(settings: Settings, progress: Progress) -> dict:
    faiss.omp_set_num_threads(settings.threads)
    if settings.toy_vectors:
        embeddings = {"v5": toy_embeddings(2000, settings.dim, settings.seed)}
        data: dict = {"real": "smoke run: toy clustered vectors stand in for the V5 embeddings"}
    else:
        objectives = ("v5", settings.baseline) if settings.baseline else ("v5",)
        progress(f"{', '.join(objectives)} embeddings of the real sentences")
        heads = head_embeddings(objectives, progress.enabled)
        embeddings = {objective: head.vectors for objective, head in heads.items()}
        data = {f"real ({objective})": head.description for objective, head in heads.items()}
    # The same seed holds out the same sentences from every head's embeddings.
    splits = {
        objective: split_queries(vectors, settings.queries, settings.seed)
        for objective, vectors in embeddings.items()
    }
    sets = {f"real {objective.upper()} embeddings": split for objective, split in splits.items()}
    data["queries"] = (
        f"{settings.queries:,} real sentences held out of every base set, embedded by the same "
        "head as the base (V5 for the synthetic set)"
    )
    base, queries = splits["v5"]
    if settings.synthetic_n:
        mixture = GaussianMixture.fit(base, settings.clusters, settings.seed)
        synthetic = mixture.sample(settings.synthetic_n, settings.seed + 3)
        sets["synthetic (fitted to V5)"] = (synthetic, queries)
        data["synthetic"] = (
            f"{settings.synthetic_n:,} draws from a Gaussian mixture fitted to the {len(base):,} "
            f"real V5 base vectors (k-means, {settings.clusters} clusters, one shared full "
            "within-cluster covariance); see index_latency.md for how it compares with the real set"
        )
    datasets = []
    with tempfile.TemporaryDirectory(prefix="fractal-c2f-") as work:
        for name, (base_of_set, queries_of_set) in sets.items():
            progress(f"{name}: N = {len(base_of_set):,}")
            datasets.append(run_dataset(name, base_of_set, queries_of_set, settings, Path(work)))
    return {
        "machine": {"faiss_threads": settings.threads},
        "data": data,
        "settings": asdict(settings),
        "datasets": datasets,
        "targets": targets(datasets, settings.c2f_target),
    }
