"""A collection whose documents are replaced over and over: its disk, its memory and its searches.

    python -m benchmarks churn                                   # 150K replacements (minutes)
    python -m benchmarks churn --smoke --out DIR                 # seconds

The collection is the tiered layout the service serves: an SQ8 HNSW graph at the shortlist
prefix and float16 full vectors memory-mapped. It holds ``--documents`` toy vectors; each round
replaces ``--replaced-per-round`` of them at random (a replaced document gets a new row id, so
its old full-vector slot is left behind), answers ``--queries`` C2F searches with texts, one at a
time, and every ``--snapshot-every`` rounds takes a snapshot (the service does so on a timer).

Each round records the full-vector file's size and the disk it takes (blocks allocated), the
store's size, and this process's ``RssAnon`` and ``RssFile``. After the last round the collection
is closed and opened again, and the same is read once more. The targets are about a steady
state, from the end of the first quarter of the rounds to the end: the disk the full vectors
take grows by at most 10% (it holds the live rows and some room for new ones, not every row
ever written), and resident memory by less than 5%.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.process_memory import status_bytes
from benchmarks.harness.runner import Progress, option

if TYPE_CHECKING:
    from index import Collection

MIB = 1 << 20
DISK_GROWTH_TARGET = 0.10
"""The full vectors' disk's growth from the end of the first quarter of the rounds to the end."""
RSS_GROWTH_TARGET = 0.05
"""Resident memory's growth from the end of the first quarter of the rounds to the end."""


@dataclass(frozen=True)
class Settings:
    documents: int = option(15_000, "documents kept in the collection")
    dim: int = option(256, "full dimension")
    shortlist_dim: int = option(192, "the graph's prefix (C2F shortlists there)")
    rounds: int = option(60, "rounds of replacement")
    replaced_per_round: int = option(2_500, "documents replaced per round")
    snapshot_every: int = option(5, "rounds between snapshots")
    queries: int = option(200, "C2F searches per round, with texts, one at a time")
    m: int = option(16, "graph degree")
    work_dir: Path | None = option(None, "where the collection lives (default: a temp folder)")
    seed: int = option(17, "random seed")


SMOKE = Settings(
    documents=1_500,
    dim=64,
    shortlist_dim=32,
    rounds=8,
    replaced_per_round=1_000,
    snapshot_every=2,
    queries=20,
    m=8,
)


def _vectors(rng: np.random.Generator, centres: np.ndarray, count: int) -> np.ndarray:
    picked = centres[rng.integers(0, len(centres), count)]
    return (picked + 0.7 * rng.standard_normal(picked.shape)).astype(np.float32)


def _reading(collection: Collection, folder: Path) -> dict:
    """Disk and memory now (the collection's files, this process's resident memory)."""
    full = collection.stats().full_vectors
    return {
        "vector_file_bytes": full["bytes_on_disk"],
        "vector_disk_bytes": full["bytes_allocated"],
        "store_bytes": sum(
            path.stat().st_size for path in folder.glob("store.sqlite3*") if path.is_file()
        ),
        "rss_anon_bytes": status_bytes(os.getpid(), "RssAnon"),
        "rss_file_bytes": status_bytes(os.getpid(), "RssFile"),
    }


def run(settings: Settings, progress: Progress) -> dict:
    from index import Collection, HnswParams

    rng = np.random.default_rng(settings.seed)
    centres = rng.standard_normal((64, settings.dim)).astype(np.float32)
    names = [f"doc-{i}" for i in range(settings.documents)]
    work = settings.work_dir or Path(tempfile.mkdtemp(prefix="fractal-churn-"))
    folder = work / "collection"
    shutil.rmtree(folder, ignore_errors=True)

    def opened() -> Collection:
        return Collection(
            folder,
            dim=settings.dim,
            prefix_dims=(settings.shortlist_dim, settings.dim),
            index_kinds=("hnsw",),
            hnsw=HnswParams(m=settings.m, ef_construction=60, storage="sq8"),
            layout={settings.shortlist_dim: ("hnsw",)},
            full_dtype="float16",
        )

    def texts(ids: list[str], round_: int) -> list[str]:
        return [f"{doc_id}, version {round_}: some words about a topic" for doc_id in ids]

    collection = opened()
    for start in range(0, len(names), 5_000):
        chunk = names[start : start + 5_000]
        collection.upsert(chunk, texts(chunk, 0), _vectors(rng, centres, len(chunk)))
    collection.snapshot()
    first = _reading(collection, folder)
    progress(f"{settings.documents:,} documents in; snapshot: {first}")
    queries = _vectors(rng, centres, settings.queries)
    rounds = []
    for round_ in range(1, settings.rounds + 1):
        picked = sorted(rng.choice(len(names), settings.replaced_per_round, replace=False))
        ids = [names[i] for i in picked]
        started = time.perf_counter()
        collection.upsert(ids, texts(ids, round_), _vectors(rng, centres, len(ids)))
        upsert_s = time.perf_counter() - started
        latencies = []
        for query in queries:
            started = time.perf_counter()
            collection.search_c2f(query, 10, settings.shortlist_dim, 4, "hnsw", contents=True)
            latencies.append(time.perf_counter() - started)
        snapshot = round_ % settings.snapshot_every == 0
        if snapshot:
            collection.snapshot()
        reading = _reading(collection, folder)
        reading.update(
            round=round_,
            snapshot=snapshot,
            upsert_seconds=upsert_s,
            search_p50_us=float(np.median(latencies) * 1e6),
            search_p99_us=float(np.percentile(latencies, 99) * 1e6),
        )
        rounds.append(reading)
        if round_ % max(1, settings.rounds // 10) == 0:
            progress(
                f"round {round_}: full vectors {reading['vector_disk_bytes'] / MIB:.1f} MiB on "
                f"disk of {reading['vector_file_bytes'] / MIB:.1f}; RSS "
                f"{(reading['rss_anon_bytes'] + reading['rss_file_bytes']) / MIB:.1f} MiB"
            )
    collection.snapshot()
    collection.close()
    collection = opened()
    reopened = _reading(collection, folder)
    collection.close()
    if settings.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    report = {"settings": asdict(settings), "first": first, "rounds": rounds, "reopened": reopened}
    report["targets"] = targets(report)
    return report


def targets(report: dict) -> list[dict]:
    first, rounds = report["first"], report["rounds"]
    last = rounds[-1]
    quarter = rounds[max(0, len(rounds) // 4 - 1)]
    disk = last["vector_disk_bytes"] / quarter["vector_disk_bytes"] - 1

    def rss(reading: dict) -> int:
        return int(reading["rss_anon_bytes"] + reading["rss_file_bytes"])

    growth = rss(last) / rss(quarter) - 1
    return [
        {
            "target": f"full vectors' disk growth from the first quarter's end ≤ "
            f"{DISK_GROWTH_TARGET:.0%}",
            "reached": f"{disk:+.1%} ({quarter['vector_disk_bytes'] / MIB:.1f} → "
            f"{last['vector_disk_bytes'] / MIB:.1f} MiB; the file "
            f"{last['vector_file_bytes'] / MIB:.1f} MiB, "
            f"{last['vector_disk_bytes'] / first['vector_disk_bytes']:.2f}× the first snapshot's "
            "disk)",
            "met": disk <= DISK_GROWTH_TARGET,
        },
        {
            "target": f"resident memory growth from the first quarter's end < "
            f"{RSS_GROWTH_TARGET:.0%}",
            "reached": f"{growth:+.1%} ({rss(quarter) / MIB:.1f} → {rss(last) / MIB:.1f} MiB)",
            "met": growth < RSS_GROWTH_TARGET,
        },
    ]


def markdown(report: dict) -> str:
    settings = report["settings"]
    replaced = settings["rounds"] * settings["replaced_per_round"]

    def row(label: str, reading: dict) -> list[str]:
        return [
            label,
            f"{reading['vector_file_bytes'] / MIB:.1f}",
            f"{reading['vector_disk_bytes'] / MIB:.1f}",
            f"{reading['store_bytes'] / MIB:.1f}",
            f"{reading['rss_anon_bytes'] / MIB:.1f}",
            f"{reading['rss_file_bytes'] / MIB:.1f}",
            f"{reading['search_p50_us']:.0f}" if "search_p50_us" in reading else "—",
        ]

    rounds = report["rounds"]
    shown = [
        rounds[i] for i in sorted({len(rounds) // 4 - 1, len(rounds) // 2 - 1, len(rounds) - 1})
    ]
    table = markdown_table(
        [
            "when",
            "vector file MiB",
            "its disk MiB",
            "store MiB",
            "RssAnon MiB",
            "RssFile MiB",
            "C2F p50 µs",
        ],
        [row("first snapshot", report["first"])]
        + [row(f"round {r['round']}", r) for r in shown]
        + [row("reopened", report["reopened"])],
    )
    return (
        "# A collection under replacement\n\n"
        f"Measured by `{report['command']}`.\n\n"
        f"- {settings['documents']:,} documents of {settings['dim']}-d toy vectors, the tiered "
        f"layout (SQ8 HNSW M{settings['m']} at {settings['shortlist_dim']}-d, float16 full "
        f"vectors memory-mapped); {settings['rounds']} rounds of {settings['replaced_per_round']:,}"
        f" replacements ({replaced:,} in all), a snapshot every {settings['snapshot_every']} "
        f"rounds, {settings['queries']} C2F searches with texts per round\n\n"
        f"{table}\n\n## Targets\n\n{targets_table(report['targets'])}\n\n"
        "## Machine\n\n" + bullet_list(report["machine"]) + "\n"
    )


def plot(report: dict, path: Path) -> None:
    rounds = report["rounds"]
    x = [r["round"] for r in rounds]
    figure = Figure(figsize=(8, 4.5))
    axes = figure.subplots()
    for key, label in (
        ("vector_file_bytes", "full-vector file size"),
        ("vector_disk_bytes", "its disk"),
        ("rss_anon_bytes", "RssAnon"),
        ("rss_file_bytes", "RssFile"),
    ):
        axes.plot(x, [r[key] / MIB for r in rounds], label=label)
    axes.set_xlabel("round")
    axes.set_ylabel("MiB")
    axes.set_title("A collection under replacement")
    axes.legend(loc="upper left", fontsize="small", ncols=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
