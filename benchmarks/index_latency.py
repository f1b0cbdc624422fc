"""Index latency by prefix dimension, at equal recall (the Fractal Embeddings paper's Table 9).

    python -m benchmarks index_latency                     # full run, about 20 min on 2 cores
    python -m benchmarks index_latency --smoke --out DIR   # seconds: toy vectors, tiny N

For 64, 128, 192 and 256-d prefixes (each L2-normalised, inner product = cosine), with raw FAISS
indexes (``IndexFlatIP``, ``IndexHNSWFlat``) on one thread:

1. Flat at N = 10,000 real V5 embeddings.
2. HNSW at N = 100,000 synthetic vectors drawn to match the real embeddings
   (:class:`benchmarks.harness.search_data.GaussianMixture`), with an efSearch sweep; the
   speed-up of 64-d over 256-d compares, for each dimension, the smallest efSearch whose
   recall@10 reaches the target (0.95).
3. A check that the synthetic vectors behave like the real ones: HNSW recall@10 per prefix and
   efSearch on the real base set and on synthetic sets of the same size.
4. The paper's setup: iid Gaussian vectors, FAISS's default HNSW parameters (M = 32,
   efConstruction = 40, efSearch = 16), side by side with the recall it reaches.

Queries are 1,000 real embeddings held out of every base set (iid Gaussian queries for 4).
Every row states recall@10 against exact search at the same dimension and in the same set.
Writes ``index_latency{,_smoke}.{json,md,png}`` to ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from benchmarks.harness.markdown import bullet_list, faster, markdown_table
from benchmarks.harness.runner import Progress, option
from benchmarks.harness.search_data import (
    GaussianMixture,
    head_embeddings,
    iid_gaussian,
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
from index.vectors import prefix_unit

K = 10
FAISS_DEFAULT_HNSW = {"m": 32, "ef_construction": 40, "ef_search": 16}
TARGET_SPEEDUP = 3.7
"""The paper's Table 9 speed-up of 64-d over 256-d HNSW, here asked for at equal recall."""


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    dims: tuple[int, ...] = (64, 128, 192, 256)
    ef_values: tuple[int, ...] = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
    queries: int = 1000
    flat_n: int = 10_000
    hnsw_n: int = option(100_000, "HNSW base size")
    check_n: int | None = None
    """Base size of the synthetic check; None: all real vectors that are not queries."""
    m: int = 32
    ef_construction: int = 200
    clusters: int = 256
    rounds: int = 3
    recall_target: float = 0.95
    threads: int = option(1, "FAISS threads")
    seed: int = 0
    toy_vectors: bool = False
    """Toy clustered vectors stand in for the V5 embeddings (no encoder, no head)."""


SMOKE = Settings(
    toy_vectors=True, ef_values=(8, 16, 32, 64), queries=50, flat_n=1000, hnsw_n=2000,
    check_n=1000, ef_construction=40, clusters=16, rounds=1,
)


def hnsw_graph(vectors: np.ndarray, m: int, ef_construction: int) -> faiss.IndexHNSWFlat:
    graph = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = ef_construction
    graph.add(vectors)
    return graph


def hnsw_search(graph: faiss.IndexHNSWFlat, ef_search: int) -> Search:
    params = faiss.SearchParametersHNSW()
    params.efSearch = ef_search
    return lambda queries: graph.search(queries, K, params=params)


def flat_rows(base: np.ndarray, queries: np.ndarray, settings: Settings) -> list[dict]:
    """Flat index per dimension: latency, throughput and recall@10 against exact search."""
    cases, recalls = {}, {}
    for dim in settings.dims:
        unit_base, unit_queries = prefix_unit(base, dim), prefix_unit(queries, dim)
        index = faiss.IndexFlatIP(dim)
        index.add(unit_base)
        found = index.search(unit_queries, K)[1]
        recalls[dim] = recall_at_k(found, exact_neighbours(unit_base, unit_queries, K), K)
        cases[str(dim)] = Case(lambda q, index=index: index.search(q, K), unit_queries)
    latencies = measure(cases, settings.rounds)
    return [
        {"dim": dim, "n": len(base), **latencies[str(dim)].to_json(), "recall_at_10": recalls[dim]}
        for dim in settings.dims
    ]


def hnsw_sweep(
    base: np.ndarray,
    queries: np.ndarray,
    settings: Settings,
    m: int,
    ef_construction: int,
    timed: bool = True,
) -> list[dict]:
    """An HNSW graph per dimension and, per efSearch, recall@10 against exact search at that
    dimension and, when ``timed``, latency and throughput (all dimensions and efSearch values
    timed in one round-robin)."""
    rows, cases = [], {}
    for dim in settings.dims:
        unit_base, unit_queries = prefix_unit(base, dim), prefix_unit(queries, dim)
        started = time.perf_counter()
        graph = hnsw_graph(unit_base, m, ef_construction)
        build_s = time.perf_counter() - started
        truth = exact_neighbours(unit_base, unit_queries, K)
        for ef in settings.ef_values:
            search = hnsw_search(graph, ef)
            cases[f"{dim}/{ef}"] = Case(search, unit_queries)
            found = search(unit_queries)[1]
            rows.append(
                {
                    "dim": dim,
                    "n": len(base),
                    "ef_search": ef,
                    "build_s": build_s,
                    "recall_at_10": recall_at_k(found, truth, K),
                }
            )
    if timed:
        latencies = measure(cases, settings.rounds)
        rows = [row | latencies[f"{row['dim']}/{row['ef_search']}"].to_json() for row in rows]
    return rows


def speedups(rows: Sequence[dict], dims: Sequence[int], target: float) -> list[dict]:
    """Per dimension, the smallest efSearch reaching ``target`` recall@10, and its speed-up over
    the largest dimension's (p50 latency ratio and batch throughput ratio)."""
    chosen = {
        dim: first_reaching([row for row in rows if row["dim"] == dim], target, "ef_search")
        for dim in dims
    }
    reference = chosen[max(dims)]
    result = []
    for dim, row in chosen.items():
        entry: dict = {"dim": dim, "reached": row is not None}
        if row is not None:
            entry |= {key: row[key] for key in ("ef_search", "recall_at_10", "p50_us", "p99_us")}
            entry["batch_qps"] = row["batch_qps"]
            if reference is not None:
                entry["speedup_p50"] = reference["p50_us"] / row["p50_us"]
                entry["speedup_batch"] = row["batch_qps"] / reference["batch_qps"]
        result.append(entry)
    return result


def at_ef(rows: Sequence[dict], ef_search: int) -> list[dict]:
    """Rows at one efSearch, each with its p50 speed-up over the largest dimension's."""
    picked = [row for row in rows if row["ef_search"] == ef_search]
    reference = max(picked, key=lambda row: row["dim"])
    return [row | {"speedup_p50": reference["p50_us"] / row["p50_us"]} for row in picked]


# -- report -----------------------------------------------------------------------------------


def _f(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def _latency_cells(row: dict) -> list[str]:
    return [
        _f(row["p50_us"]),
        _f(row["p99_us"]),
        _f(row["batch_qps"], 0),
        _f(row["recall_at_10"], 3),
    ]


def _speedup_table(entries: Sequence[dict]) -> str:
    cells = []
    for entry in entries:
        if not entry["reached"]:
            cells.append([entry["dim"], "not reached", "", "", "", "", "", ""])
            continue
        ratios = [
            f"{entry[key]:.2f}×" if key in entry else "" for key in ("speedup_p50", "speedup_batch")
        ]
        cells.append([entry["dim"], entry["ef_search"], *_latency_cells(entry), *ratios])
    headers = ["dim", "efSearch", "p50 µs", "p99 µs", "batch q/s", "recall@10"]
    return markdown_table([*headers, "speed-up p50", "speed-up batch"], cells)


def _sweep_table(rows: Sequence[dict]) -> str:
    return markdown_table(
        ["dim", "efSearch", "p50 µs", "p99 µs", "batch q/s", "recall@10"],
        [[row["dim"], row["ef_search"], *_latency_cells(row)] for row in rows],
    )


def _check_table(rows: Sequence[dict], names: Sequence[str]) -> str:
    recall = {(row["set"], row["dim"], row["ef_search"]): row["recall_at_10"] for row in rows}
    keys = sorted({(row["dim"], row["ef_search"]) for row in rows})
    return markdown_table(
        ["dim", "efSearch", *names],
        [[dim, ef, *(_f(recall[name, dim, ef], 3) for name in names)] for dim, ef in keys],
    )


def _verdict(entries: Sequence[dict], target: float, what: str) -> str:
    """One sentence: the smallest dimension's speed-up over the largest at the recall target."""
    by_dim = {entry["dim"]: entry for entry in entries}
    low, high = by_dim[min(by_dim)], by_dim[max(by_dim)]
    if low.get("speedup_p50") is None:
        reached = [str(entry["dim"]) for entry in entries if entry["reached"]]
        return (
            f"{what}: recall@10 ≥ {target} is reached only at {', '.join(reached) or 'no'} "
            "dimension(s) within the efSearch sweep, so there is no speed-up at equal recall."
        )
    met = "met" if low["speedup_p50"] >= TARGET_SPEEDUP else "missed"
    return (
        f"{what}: **{low['dim']}-d HNSW is {faster(low['speedup_p50'])} than {high['dim']}-d "
        f"in p50 single-query latency ({faster(low['speedup_batch'])} in batch throughput) at "
        f"recall@10 ≥ {target}** (efSearch {low['ef_search']} vs {high['ef_search']}; recall "
        f"{low['recall_at_10']:.3f} vs {high['recall_at_10']:.3f}). Target ≥ {TARGET_SPEEDUP}×: "
        f"**{met}**."
    )


def targets(report: dict) -> list[dict]:
    """The smallest dimension's p50 speed-up over the largest at the recall target, on the
    synthetic set and on the real one."""
    target = report["settings"]["recall_target"]
    result = []
    for key, what in (
        ("hnsw_speedup_at_recall", f"N = {report['settings']['hnsw_n']:,} synthetic"),
        ("hnsw_real_speedup_at_recall", f"N = {report['synthetic_check']['n']:,} real"),
    ):
        by_dim = {entry["dim"]: entry for entry in report[key]}
        low, high = min(by_dim), max(by_dim)
        speedup = by_dim[low].get("speedup_p50")
        result.append(
            {
                "target": f"{what}: {low}-d HNSW ≥ {TARGET_SPEEDUP}× faster than {high}-d "
                f"(p50) at recall@10 ≥ {target}",
                "reached": "recall target not reached" if speedup is None else speedup,
                "met": speedup is not None and speedup >= TARGET_SPEEDUP,
            }
        )
    return result


def markdown(report: dict) -> str:
    settings, data = report["settings"], report["data"]
    target = settings["recall_target"]
    check = report["synthetic_check"]
    paper = report["paper_setup_default_ef"]
    low, high = paper[0], paper[-1]
    parts = [
        f"# Index latency by prefix dimension{' (smoke run)' if report['smoke'] else ''}",
        f"Measured by `{report['command']}`. Raw FAISS indexes (`IndexFlatIP`, "
        "`IndexHNSWFlat`), inner product over L2-normalised prefixes (queries normalised before "
        "the timed call), one query per call for p50/p99, one call with all "
        f"{settings['queries']:,} queries for batch throughput, {settings['threads']} FAISS "
        f"thread(s), {settings['rounds']} interleaved rounds. recall@10 is against exact search "
        "at the same dimension in the same set. p99 includes any time the process was "
        "descheduled while other processes ran on this shared machine (see the load average); "
        "p50 and batch throughput are the figures to compare.",
        "## Machine\n\n" + bullet_list(report["machine"]),
        "## Data\n\n" + bullet_list(data),
        "## Parameters\n\n" + bullet_list(settings),
        "## Smaller prefixes against 256-d HNSW at equal recall\n\n"
        f"For each dimension the smallest efSearch reaching recall@10 ≥ {target}; speed-ups "
        f"against {high['dim']}-d.\n\n"
        + _verdict(
            report["hnsw_speedup_at_recall"],
            target,
            f"N = {settings['hnsw_n']:,} synthetic vectors",
        )
        + "\n\n"
        + _speedup_table(report["hnsw_speedup_at_recall"])
        + "\n\n"
        + _verdict(
            report["hnsw_real_speedup_at_recall"],
            target,
            f"N = {check['n']:,} real V5 embeddings",
        )
        + "\n\n"
        + _speedup_table(report["hnsw_real_speedup_at_recall"]),
        f"## Flat, N = {settings['flat_n']:,} real embeddings\n\n"
        + markdown_table(
            ["dim", "p50 µs", "p99 µs", "batch q/s", "recall@10", "speed-up p50 vs 256-d"],
            [
                [row["dim"], *_latency_cells(row), f"{row['speedup_p50']:.2f}×"]
                for row in report["flat"]
            ],
        ),
        "## The paper's setup: iid Gaussian, FAISS defaults (M 32, efConstruction 40, efSearch "
        f"16), N = {settings['hnsw_n']:,}\n\n"
        f"At efSearch 16 the {low['dim']}-d index is {faster(low['speedup_p50'])} than "
        f"{high['dim']}-d, but at recall@10 {low['recall_at_10']:.3f} against "
        f"{high['recall_at_10']:.3f}: the two do not return results of the same quality, so "
        "this ratio is not a speed-up at equal recall (the paper's Table 9 reports 3.7× for "
        "HNSW and 5.1× for flat, with no recall).\n\n"
        + markdown_table(
            ["dim", "p50 µs", "p99 µs", "batch q/s", "recall@10", "speed-up p50 vs 256-d"],
            [[row["dim"], *_latency_cells(row), f"{row['speedup_p50']:.2f}×"] for row in paper],
        )
        + "\n\nSame vectors, smallest efSearch reaching the recall target per dimension:\n\n"
        + _speedup_table(report["paper_setup_speedup_at_recall"]),
        f"## Synthetic vectors against real ones (HNSW recall@10, N = {check['n']:,} each, "
        "same real queries)\n\n"
        + check["description"]
        + "\n\n"
        + _check_table(check["rows"], check["sets"]),
        f"## HNSW efSearch sweep, N = {settings['hnsw_n']:,} synthetic\n\n"
        + _sweep_table(report["hnsw"]),
        f"## HNSW efSearch sweep, N = {check['n']:,} real\n\n" + _sweep_table(report["hnsw_real"]),
        "## HNSW efSearch sweep, paper's setup (iid Gaussian)\n\n"
        + _sweep_table(report["paper_setup"]),
    ]
    return "\n\n".join(parts)


def plot(report: dict, path: Path) -> None:
    settings = report["settings"]
    figure = Figure(figsize=(22, 5))
    axes = figure.subplots(1, 4)
    for axis, key, title in (
        (axes[0], "hnsw", f"HNSW, {settings['hnsw_n']:,} synthetic (real-like)"),
        (axes[1], "hnsw_real", f"HNSW, {report['synthetic_check']['n']:,} real V5 embeddings"),
        (axes[2], "paper_setup", "HNSW, iid Gaussian, FAISS defaults (paper's setup)"),
    ):
        for dim in settings["dims"]:
            rows = [row for row in report[key] if row["dim"] == dim]
            axis.plot(
                [r["p50_us"] for r in rows],
                [r["recall_at_10"] for r in rows],
                "o-",
                label=f"{dim}-d",
            )
        axis.axhline(settings["recall_target"], color="grey", lw=0.8, ls=":")
        axis.set(
            xscale="log",
            xlabel="p50 single-query latency (µs)",
            ylabel="recall@10",
            title=title,
        )
        axis.legend()
    check = report["synthetic_check"]
    styles = dict(zip(check["sets"], ("-", "--", ":"), strict=False))
    for dim, color in zip(settings["dims"], ("C0", "C1", "C2", "C3"), strict=False):
        for name, style in styles.items():
            rows = [r for r in check["rows"] if r["dim"] == dim and r["set"] == name]
            axes[3].plot(
                [r["ef_search"] for r in rows],
                [r["recall_at_10"] for r in rows],
                style,
                color=color,
                label=f"{dim}-d {name}",
            )
    axes[3].set(
        xscale="log",
        xlabel="efSearch",
        ylabel="recall@10",
        title=f"Real vs synthetic, N = {check['n']:,}",
    )
    axes[3].legend(fontsize=7)
    for axis in axes:
        axis.xaxis.set_minor_formatter(NullFormatter())  # crowded on short log ranges
    figure.tight_layout()
    figure.savefig(path, dpi=120)


# -- run --------------------------------------------------------------------------------------


def run(settings: Settings, progress: Progress) -> dict:
    faiss.omp_set_num_threads(settings.threads)

    if settings.toy_vectors:
        vectors = toy_embeddings(4000, max(settings.dims), settings.seed)
        data: dict = {"real": "smoke run: toy clustered vectors stand in for the V5 embeddings"}
    else:
        progress("V5 embeddings of the real sentences")
        real = head_embeddings(("v5",), progress.enabled)["v5"]
        vectors, data = real.vectors, {"real": real.description}
    base, queries = split_queries(vectors, settings.queries, settings.seed)
    data["real_base"] = len(base)
    data["queries"] = f"{len(queries):,} real embeddings held out of every base set"

    progress(f"flat, N = {settings.flat_n:,}")
    flat = flat_rows(base[: settings.flat_n], queries, settings)
    flat = [row | {"speedup_p50": flat[-1]["p50_us"] / row["p50_us"]} for row in flat]

    check_n = settings.check_n or len(base)
    progress(f"HNSW, N = {check_n:,} real")
    hnsw_real = hnsw_sweep(base[:check_n], queries, settings, settings.m, settings.ef_construction)
    mixture = GaussianMixture.fit(base, settings.clusters, settings.seed)
    single = GaussianMixture.fit(base, 1, settings.seed)
    check_sets = {
        f"mixture ({settings.clusters} clusters)": mixture.sample(check_n, settings.seed + 1),
        "single Gaussian": single.sample(check_n, settings.seed + 2),
    }
    progress(f"synthetic check, N = {check_n:,}")
    check_rows = [{"set": "real", **row} for row in hnsw_real]
    for name, vectors_of_set in check_sets.items():
        sweep = hnsw_sweep(
            vectors_of_set, queries, settings, settings.m, settings.ef_construction, timed=False
        )
        check_rows += [{"set": name, **row} for row in sweep]
    data["synthetic"] = (
        f"{settings.hnsw_n:,} draws from a Gaussian mixture fitted to the {len(base):,} real base "
        f"vectors: k-means ({settings.clusters} clusters) means and weights, one shared full "
        "256×256 within-cluster covariance (sampled through its Cholesky factor)"
    )

    progress(f"HNSW, N = {settings.hnsw_n:,} synthetic")
    synthetic = mixture.sample(settings.hnsw_n, settings.seed + 3)
    hnsw = hnsw_sweep(synthetic, queries, settings, settings.m, settings.ef_construction)

    progress("paper's setup: iid Gaussian, FAISS defaults")
    dim = max(settings.dims)
    paper = hnsw_sweep(
        iid_gaussian(settings.hnsw_n, dim, settings.seed + 4),
        iid_gaussian(settings.queries, dim, settings.seed + 5),
        settings,
        FAISS_DEFAULT_HNSW["m"],
        FAISS_DEFAULT_HNSW["ef_construction"],
    )
    data["paper_setup"] = (
        f"{settings.hnsw_n:,} iid standard normal 256-d vectors and {settings.queries:,} iid "
        "queries; each prefix normalised (the paper's L2 search on raw iid vectors ranks almost "
        "the same, as their norms concentrate)"
    )
    report = {
        "machine": {"faiss_threads": settings.threads},
        "data": data,
        "settings": asdict(settings) | {"check_n": check_n},
        "flat": flat,
        "hnsw": hnsw,
        "hnsw_speedup_at_recall": speedups(hnsw, settings.dims, settings.recall_target),
        "hnsw_real": hnsw_real,
        "hnsw_real_speedup_at_recall": speedups(hnsw_real, settings.dims, settings.recall_target),
        "paper_setup": paper,
        "paper_setup_default_ef": at_ef(paper, FAISS_DEFAULT_HNSW["ef_search"]),
        "paper_setup_speedup_at_recall": speedups(paper, settings.dims, settings.recall_target),
        "synthetic_check": {
            "n": check_n,
            "sets": ["real", *check_sets],
            "description": (
                "HNSW (same M and efConstruction as above) over the real base vectors and over "
                "as many draws from the fitted mixture and from a single full-covariance "
                "Gaussian; the same held-out real queries."
            ),
            "rows": check_rows,
        },
    }
    return report | {"targets": targets(report)}
