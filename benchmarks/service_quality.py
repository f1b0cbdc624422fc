"""Issue 3's quality targets, measured through the live service over real HTTP.

    python -m benchmarks service_quality --bundle runs/clinc150/bundle
    python -m benchmarks service_quality --bundle B --smoke --out /tmp/sq  # tiny

Starts ``python -m service`` on 127.0.0.1 (a free port, a fresh index folder), ingests the
CLINC-150 training utterances as documents (metadata: domain, intent), then sends CLINC-150 test
utterances as queries and measures:

- **coarse domain precision**: the share of coarse search's top-10 hits (64-d prefix, exact
  index) whose domain is the query's, averaged over queries; and the share of queries whose ten
  hits all share its domain;
- **C2F recall@10** against exact search at the full dimension (the ids the two return), and the
  same for HNSW at the full dimension;
- **auto routing accuracy** on a mixed coarse/fine workload built from CLINC-150: a *fine* query
  is one test utterance (it names one intent); a *coarse* query joins two test utterances of two
  different intents of the same domain with " and " (it is about the domain, not one intent).
  The right resolution is fine for the first kind and coarse for the second; we count how often
  ``granularity=auto`` picks it, for each kind and for a 50/50 mix.

Writes ``service_quality[_TAG][_smoke].{json,md}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.harness.clinc_documents import labelled_documents
from benchmarks.harness.processes import live_service
from benchmarks.harness.runner import Progress, bundle_folder, option
from bundle import COARSE, FINE
from client import FractalClient, SearchResult
from training.data.registry import load_dataset
from training.evaluation.mixed_queries import join_queries

K = 10
C2F_FACTORS = (4, 10, 25, 50)
SERVICE = {"index_kinds": "exact,hnsw"}


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    bundle: Path | None = option(
        None, "a V5 CLINC-150 bundle (fractal run …)", parse=bundle_folder, required=True
    )
    documents: int | None = option(None, "training utterances ingested (default: all)")
    queries: int = option(2000, "test utterances")
    mixed_size: int = option(500, "queries of each kind in the mixed coarse/fine workload")
    tag: str = option("", "added to the result file names")


SMOKE = Settings(documents=600, queries=100, mixed_size=50)


def results_name(settings: Settings) -> str:
    return "service_quality" + (f"_{settings.tag}" if settings.tag else "")


def run(settings: Settings, progress: Progress) -> dict:
    assert settings.bundle is not None, "--bundle is required"
    bundle = settings.bundle
    data = load_dataset("clinc150", max_train=settings.documents, max_test=settings.queries)
    domains = data.hierarchy.label_names[0]
    documents = labelled_documents(data.train, {"domain": 0, "intent": 1}, id_prefix="train-")
    queries = list(data.test.texts)
    mixed = join_queries(data.test, 2 * settings.mixed_size, seed=7)
    fine_q = [query.text for query in mixed if query.level == FINE]
    coarse_q = [query.text for query in mixed if query.level == COARSE]
    with tempfile.TemporaryDirectory() as work:
        index_dir, log = Path(work) / "index", Path(work) / "service.log"
        with (
            live_service(bundle, index_dir, log, c2f_factor=C2F_FACTORS[0], **SERVICE) as url,
            FractalClient(url) as client,
        ):
            progress(f"ingesting {len(documents)} documents")
            started = time.perf_counter()
            client.add_documents(documents)
            ingest_seconds = time.perf_counter() - started
            progress(f"searching with {len(queries)} queries")
            query_domains = [domains[d] for d in data.test.labels[:, 0]]
            coarse = client.search_batch(queries, k=K, granularity="coarse", index="exact")
            exact = client.search_batch(queries, k=K, granularity="fine", index="exact")
            c2f = {
                C2F_FACTORS[0]: client.search_batch(
                    queries, k=K, granularity="fine", index="exact", rerank="c2f"
                )
            }
            hnsw = client.search_batch(queries, k=K, granularity="fine", index="hnsw")
            auto_fine = client.search_batch(fine_q, k=K, granularity="auto", index="exact")
            auto_coarse = client.search_batch(coarse_q, k=K, granularity="auto", index="exact")
            info = client.info()
        for factor in C2F_FACTORS[1:]:
            progress(f"C2F with factor {factor}")
            # Same index folder: the restarted service serves what was acknowledged before.
            with (
                live_service(bundle, index_dir, log, c2f_factor=factor, **SERVICE) as url,
                FractalClient(url) as client,
            ):
                c2f[factor] = client.search_batch(
                    queries, k=K, granularity="fine", index="exact", rerank="c2f"
                )

    def ids(result: SearchResult) -> set[str]:
        return set(result.ids)

    same_domain = [
        [hit.metadata["domain"] == domain for hit in result.hits]
        for result, domain in zip(coarse, query_domains, strict=True)
    ]

    def recall(approx: list[SearchResult]) -> float:
        pairs = zip(approx, exact, strict=True)
        return float(np.mean([len(ids(a) & ids(e)) / K for a, e in pairs]))

    picked_fine = np.mean([r.route.granularity == "fine" for r in auto_fine])
    picked_coarse = np.mean([r.route.granularity == "coarse" for r in auto_coarse])
    record = {
        "bundle": str(bundle),
        "bundle_objective": info.get("manifest", {}).get("objective"),
        "documents": len(documents),
        "queries": len(queries),
        "ingest_seconds": ingest_seconds,
        "coarse_dimension": coarse[0].route.dimension,
        "fine_dimension": exact[0].route.dimension,
        "c2f_shortlist_dimension": c2f[C2F_FACTORS[0]][0].route.shortlist_dimension,
        "coarse_hit_domain_precision": float(np.mean([np.mean(row) for row in same_domain])),
        "coarse_all_ten_same_domain": float(np.mean([all(row) for row in same_domain])),
        "c2f_recall_at_10": {factor: recall(results) for factor, results in c2f.items()},
        "hnsw_fine_recall_at_10": recall(hnsw),
        "auto_fine_queries_routed_fine": float(picked_fine),
        "auto_coarse_queries_routed_coarse": float(picked_coarse),
        "auto_accuracy_50_50": float((picked_fine + picked_coarse) / 2),
        "mixed_workload_size_per_kind": settings.mixed_size,
    }
    return record | {"targets": targets(record)}


def measures(record: dict) -> list[tuple[str, str, float, bool | None]]:
    """``(measure, target, reached, met)`` for every number the table shows (target "—" and
    met None where there is none)."""
    return [
        (
            "coarse search: top-10 hits in the query's domain",
            "≥ 0.95",
            record["coarse_hit_domain_precision"],
            record["coarse_hit_domain_precision"] >= 0.95,
        ),
        (
            "coarse search: queries whose 10 hits all share its domain",
            "—",
            record["coarse_all_ten_same_domain"],
            None,
        ),
        *(
            (
                f"C2F recall@10 vs exact full-dim search, k' = {K * int(factor)}",
                "≥ 0.99",
                value,
                value >= 0.99,
            )
            for factor, value in record["c2f_recall_at_10"].items()
        ),
        ("HNSW (full dim) recall@10 vs exact", "—", record["hnsw_fine_recall_at_10"], None),
        ("auto: fine queries routed fine", "—", record["auto_fine_queries_routed_fine"], None),
        (
            "auto: coarse queries routed coarse",
            "—",
            record["auto_coarse_queries_routed_coarse"],
            None,
        ),
        ("auto: right resolution on a 50/50 mix", "—", record["auto_accuracy_50_50"], None),
    ]


def targets(record: dict) -> list[dict]:
    return [
        {"target": f"{name} {target}", "reached": value, "met": met}
        for name, target, value, met in measures(record)
        if met is not None
    ]


def markdown(record: dict) -> str:
    lines = [
        f"# Service quality through HTTP{' (smoke run)' if record['smoke'] else ''}",
        "",
        f"Bundle: `{record['bundle']}` ({record['bundle_objective']}). Corpus: "
        f"{record['documents']} CLINC-150 training utterances ingested through `POST /documents` "
        f"in {record['ingest_seconds']:.0f} s. Queries: {record['queries']} CLINC-150 test "
        f"utterances through `POST /search`, k = {K}. Coarse = {record['coarse_dimension']}d, "
        f"fine = {record['fine_dimension']}d; C2F shortlists k' = k × factor at the bundle's "
        f"shortlist prefix ({record.get('c2f_shortlist_dimension', record['coarse_dimension'])}d)"
        " and re-ranks exactly at the fine one. "
        f"Mixed workload: {record['mixed_workload_size_per_kind']} queries of each kind.",
        "",
        f"Command: `{record['command']}`",
        "",
        "| measure | target | reached | met |",
        "|---|---|---|---|",
    ]
    for name, target, value, met in measures(record):
        verdict = "" if met is None else ("yes" if met else "**no**")
        lines.append(f"| {name} | {target} | {value:.3f} | {verdict} |")
    return "\n".join(lines) + "\n"
