"""The MSHC bundle served over real HTTP: MRR@10 of exact, 8-byte PQ and PQ + exact C2F
re-ranking, and the bytes per vector ``/info`` reports for each index.

    python -m benchmarks mshc_service --bundle runs/clinc150-mshc/bundle
    python -m benchmarks mshc_service --bundle DIR --smoke --out /tmp/x   # 1,500 docs, 100 queries

Starts ``python -m service`` with ``FRACTAL_INDEX_KINDS=pq,exact`` (the 96-d PQ index is built
from the bundle's codebooks) and ``FRACTAL_C2F_FACTOR=10`` (k = 10 → a shortlist of 100 at 96-d,
re-ranked exactly at 384-d), ingests CLINC-150 training utterances (metadata: intent), sends
test utterances as queries; a hit is relevant when its intent is the query's. Writes
``mshc_service[_smoke].{json,md}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from benchmarks.harness.clinc_documents import labelled_documents
from benchmarks.harness.processes import live_service
from benchmarks.harness.runner import Progress, bundle_folder, option
from client import FractalClient, SearchResult
from training.data.registry import load_dataset

K = 10
C2F_FACTOR = 10
ROUTES = {
    "exact 384-d": {"granularity": "fine", "index": "exact"},
    "exact 96-d": {"granularity": "coarse", "index": "exact"},
    "pq 96-d (8 B)": {"granularity": "coarse", "index": "pq"},
    # The PQ shortlist at the prefix the bundle's codebooks are for, whatever the bundle's
    # measured shortlist prefix (which the service would otherwise shortlist at).
    f"pq 96-d shortlist {K * C2F_FACTOR} + exact re-rank 384-d": {
        "index": "pq",
        "rerank": "c2f",
        "shortlist_dim": 96,
    },
}


def mrr_at_k(results: list[SearchResult], query_intents: list[str]) -> float:
    ranks = []
    for result, intent in zip(results, query_intents, strict=True):
        hits = [hit.metadata["intent"] == intent for hit in result.hits[:K]]
        ranks.append(1.0 / (hits.index(True) + 1) if True in hits else 0.0)
    return float(np.mean(ranks))


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    bundle: Path | None = option(None, "an MSHC bundle", parse=bundle_folder, required=True)
    documents: int = option(10_000, "training utterances ingested")
    queries: int = option(2_000, "test utterances")


SMOKE = Settings(documents=1_500, queries=100)


def run(settings: Settings, progress: Progress) -> dict:
    assert settings.bundle is not None, "--bundle is required"
    data = load_dataset("clinc150", max_train=settings.documents, max_test=settings.queries)
    intents = data.hierarchy.label_names[-1]
    query_intents = [intents[i] for i in data.test.labels[:, -1]]
    queries = list(data.test.texts)
    with tempfile.TemporaryDirectory() as folder:
        service = {"index_kinds": "pq,exact", "c2f_factor": C2F_FACTOR}
        index_dir, log = Path(folder) / "index", Path(folder) / "log"
        with (
            live_service(settings.bundle, index_dir, log, **service) as url,
            FractalClient(url) as client,
        ):
            progress(f"ingesting {len(data.train)} documents")
            client.add_documents(labelled_documents(data.train, {"intent": -1}))
            progress(f"searching with {len(queries)} queries")
            results = {
                name: client.search_batch(queries, k=K, **options)
                for name, options in ROUTES.items()
            }
            info = client.info()
    exact_ids = [set(r.ids) for r in results["exact 384-d"]]
    rows = []
    for name, found in results.items():
        recall = np.mean(
            [
                len(truth & set(r.ids)) / len(truth)
                for truth, r in zip(exact_ids, found, strict=True)
            ]
        )
        rows.append(
            {
                "search": name,
                "mrr_at_10": mrr_at_k(found, query_intents),
                "recall_at_10_vs_exact_384": float(recall),
                "route": asdict(found[0].route),
            }
        )
    full = rows[0]["mrr_at_10"]
    for row in rows:
        row["relative_mrr"] = row["mrr_at_10"] / full
    return {
        "documents": len(data.train),
        "queries": len(queries),
        "k": K,
        "c2f_factor": C2F_FACTOR,
        "rows": rows,
        "indexes": [
            {
                key: index[key]
                for key in (
                    "dimension",
                    "kind",
                    "vectors",
                    "bytes",
                    "bytes_per_vector",
                    "codebooks",
                )
            }
            for index in info["indexes"]
        ],
        "targets": [],
    }


def markdown(record: dict) -> str:
    lines = [
        f"# MSHC bundle over HTTP{' (smoke run)' if record['smoke'] else ''}",
        "",
        f"{record['documents']} CLINC-150 training utterances ingested, {record['queries']} test "
        f"utterances as queries, k = {record['k']}, relevant = same intent.",
        "",
        "| search | MRR@10 | relative to exact 384-d | recall@10 vs exact 384-d |",
        "|---|---|---|---|",
        *(
            f"| {r['search']} | {r['mrr_at_10']:.4f} | {100 * r['relative_mrr']:.1f}% | "
            f"{r['recall_at_10_vs_exact_384']:.3f} |"
            for r in record["rows"]
        ),
        "",
        "| index | dim | vectors | bytes per vector | codebooks | index bytes |",
        "|---|---|---|---|---|---|",
        *(
            f"| {i['kind']} | {i['dimension']} | {i['vectors']} | {i['bytes_per_vector']} | "
            f"{i['codebooks'] or '—'} | {i['bytes']} |"
            for i in record["indexes"]
        ),
        "",
    ]
    return "\n".join(lines)
