"""The MSHC bundle served over real HTTP: MRR@10 of exact, 8-byte PQ and PQ + exact C2F
re-ranking, and the bytes per vector ``/info`` reports for each index.

    python -m benchmarks.mshc_service --bundle runs/clinc150-mshc/bundle
    python -m benchmarks.mshc_service --bundle DIR --smoke --out /tmp/x   # 1,500 docs, 100 queries

Starts ``python -m service`` with ``FRACTAL_INDEX_KINDS=pq,exact`` (the 96-d PQ index is built
from the bundle's codebooks) and ``FRACTAL_C2F_FACTOR=10`` (k = 10 → a shortlist of 100 at 96-d,
re-ranked exactly at 384-d), ingests CLINC-150 training utterances (metadata: intent), sends
test utterances as queries; a hit is relevant when its intent is the query's. Writes
``mshc_service[_smoke].{json,md}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from benchmarks.live_service import live_service
from benchmarks.service_quality import BATCH, K, search
from training.data.registry import load_dataset

RESULTS = Path(__file__).resolve().parent / "results"
C2F_FACTOR = 10
ROUTES = {
    "exact 384-d": {"granularity": "fine", "index": "exact"},
    "exact 96-d": {"granularity": "coarse", "index": "exact"},
    "pq 96-d (8 B)": {"granularity": "coarse", "index": "pq"},
    f"pq 96-d shortlist {K * C2F_FACTOR} + exact re-rank 384-d": {"index": "pq", "rerank": "c2f"},
}


def mrr_at_k(results: list[dict], query_intents: list[str]) -> float:
    ranks = []
    for result, intent in zip(results, query_intents, strict=True):
        hits = [hit["metadata"]["intent"] == intent for hit in result["hits"][:K]]
        ranks.append(1.0 / (hits.index(True) + 1) if True in hits else 0.0)
    return float(np.mean(ranks))


def measure(bundle: Path, max_docs: int | None, max_queries: int) -> dict:
    data = load_dataset("clinc150", max_train=max_docs, max_test=max_queries)
    intents = data.hierarchy.label_names[-1]
    docs = data.train
    query_intents = [intents[i] for i in data.test.labels[:, -1]]
    with tempfile.TemporaryDirectory() as folder:
        settings = {"index_kinds": "pq,exact", "c2f_factor": C2F_FACTOR}
        with (
            live_service(bundle, Path(folder) / "index", Path(folder) / "log", **settings) as url,
            httpx.Client(base_url=url, timeout=300) as client,
        ):
            for start in range(0, len(docs), BATCH):
                batch = [
                    {"text": docs.texts[i], "metadata": {"intent": intents[docs.labels[i, -1]]}}
                    for i in range(start, min(start + BATCH, len(docs)))
                ]
                client.post("/documents", json={"documents": batch}).raise_for_status()
            queries = list(data.test.texts)
            results = {name: search(client, queries, **options) for name, options in ROUTES.items()}
            info = client.get("/info").raise_for_status().json()
    exact_ids = [{hit["id"] for hit in r["hits"]} for r in results["exact 384-d"]]
    rows = []
    for name, found in results.items():
        recall = np.mean([
            len(truth & {hit["id"] for hit in r["hits"]}) / len(truth)
            for truth, r in zip(exact_ids, found, strict=True)
        ])
        rows.append({"search": name, "mrr_at_10": mrr_at_k(found, query_intents),
                     "recall_at_10_vs_exact_384": float(recall), "route": found[0]["route"]})
    full = rows[0]["mrr_at_10"]
    for row in rows:
        row["relative_mrr"] = row["mrr_at_10"] / full
    return {
        "documents": len(docs),
        "queries": len(queries),
        "k": K,
        "c2f_factor": C2F_FACTOR,
        "rows": rows,
        "indexes": [
            {key: index[key] for key in ("dimension", "kind", "vectors", "bytes",
                                         "bytes_per_vector", "codebooks")}
            for index in info["indexes"]
        ],
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average_1_5_15_min_at_end": list(os.getloadavg())},
    }


def markdown(record: dict) -> str:
    lines = [
        "# MSHC bundle over HTTP (benchmarks/mshc_service.py)",
        "",
        f"{record['documents']} CLINC-150 training utterances ingested, {record['queries']} test "
        f"utterances as queries, k = {record['k']}, relevant = same intent.",
        "",
        "| search | MRR@10 | relative to exact 384-d | recall@10 vs exact 384-d |",
        "|---|---|---|---|",
        *(f"| {r['search']} | {r['mrr_at_10']:.4f} | {100 * r['relative_mrr']:.1f}% | "
          f"{r['recall_at_10_vs_exact_384']:.3f} |" for r in record["rows"]),
        "",
        "| index | dim | vectors | bytes per vector | codebooks | index bytes |",
        "|---|---|---|---|---|---|",
        *(f"| {i['kind']} | {i['dimension']} | {i['vectors']} | {i['bytes_per_vector']} | "
          f"{i['codebooks'] or '—'} | {i['bytes']} |" for i in record["indexes"]),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", type=Path, required=True, help="an MSHC bundle")
    parser.add_argument("--smoke", action="store_true", help="1,500 documents, 100 queries")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started = time.perf_counter()
    record = measure(args.bundle, 1500 if args.smoke else 10000, 100 if args.smoke else 2000)
    record["wall_s"] = time.perf_counter() - started
    stem = "mshc_service_smoke" if args.smoke else "mshc_service"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(record, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(record))
    print(args.out / f"{stem}.md")


if __name__ == "__main__":
    main()
