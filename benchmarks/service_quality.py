"""Issue 3's quality targets, measured through the live service over real HTTP.

    python benchmarks/service_quality.py --bundle runs/clinc150/bundle
    python benchmarks/service_quality.py --smoke --out /tmp/sq     # tiny, for CI

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

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from training.data.registry import load_dataset

RESULTS = Path(__file__).resolve().parent / "results"
BATCH = 128
K = 10
C2F_FACTORS = (4, 10, 25, 50)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_service(bundle: Path, index_dir: Path, port: int, c2f_factor: int) -> subprocess.Popen:
    env = dict(
        os.environ,
        FRACTAL_C2F_FACTOR=str(c2f_factor),
        FRACTAL_BUNDLE_DIR=str(bundle),
        FRACTAL_INDEX_DIR=str(index_dir),
        FRACTAL_PORT=str(port),
        FRACTAL_INDEX_KINDS="exact,hnsw",
        FRACTAL_LOG_LEVEL="warning",
    )
    process = subprocess.Popen([sys.executable, "-m", "service"], env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the service exited with status {process.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("the service did not become ready within 120 s")


def search(client: httpx.Client, queries: list[str], **options) -> list[dict]:
    results = []
    for start in range(0, len(queries), BATCH):
        response = client.post(
            "/search", json={"queries": queries[start : start + BATCH], "k": K, **options}
        )
        response.raise_for_status()
        results += response.json()["results"]
    return results


def mixed_workload(texts: tuple[str, ...], labels: np.ndarray, size: int, seed: int):
    """``size`` fine queries (single utterances) and ``size`` coarse ones (two intents, one
    domain, joined)."""
    rng = np.random.default_rng(seed)
    fine = [texts[i] for i in rng.choice(len(texts), size, replace=False)]
    coarse = []
    while len(coarse) < size:
        first = int(rng.integers(len(texts)))
        same_domain = np.flatnonzero(
            (labels[:, 0] == labels[first, 0]) & (labels[:, 1] != labels[first, 1])
        )
        second = int(rng.choice(same_domain))
        coarse.append(f"{texts[first].rstrip('?.! ')} and {texts[second]}")
    return fine, coarse


def measure(bundle: Path, max_docs: int | None, max_queries: int, mixed_size: int) -> dict:
    data = load_dataset("clinc150", max_train=max_docs, max_test=max_queries)
    domains, intents = data.hierarchy.label_names
    docs = data.train
    with tempfile.TemporaryDirectory() as index_dir:
        port = free_port()
        process = start_service(bundle, Path(index_dir), port, C2F_FACTORS[0])
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
                started = time.perf_counter()
                for start in range(0, len(docs), BATCH):
                    batch = [
                        {
                            "id": f"train-{i}",
                            "text": docs.texts[i],
                            "metadata": {
                                "domain": domains[docs.labels[i, 0]],
                                "intent": intents[docs.labels[i, 1]],
                            },
                        }
                        for i in range(start, min(start + BATCH, len(docs)))
                    ]
                    client.post("/documents", json={"documents": batch}).raise_for_status()
                ingest_seconds = time.perf_counter() - started
                queries = list(data.test.texts)
                query_domains = [domains[d] for d in data.test.labels[:, 0]]
                coarse = search(client, queries, granularity="coarse", index="exact")
                exact = search(client, queries, granularity="fine", index="exact")
                c2f = {
                    C2F_FACTORS[0]: search(
                        client, queries, granularity="fine", index="exact", rerank="c2f"
                    )
                }
                hnsw = search(client, queries, granularity="fine", index="hnsw")
                fine_q, coarse_q = mixed_workload(data.test.texts, data.test.labels, mixed_size, 7)
                auto_fine = search(client, fine_q, granularity="auto", index="exact")
                auto_coarse = search(client, coarse_q, granularity="auto", index="exact")
                info = client.get("/info").json()
        finally:
            process.terminate()
            process.wait(timeout=60)
        for factor in C2F_FACTORS[1:]:
            # Same index folder: the restarted service serves what was acknowledged before.
            process = start_service(bundle, Path(index_dir), port, factor)
            try:
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
                    c2f[factor] = search(
                        client, queries, granularity="fine", index="exact", rerank="c2f"
                    )
            finally:
                process.terminate()
                process.wait(timeout=60)

    def ids(result: dict) -> set[str]:
        return {hit["id"] for hit in result["hits"]}

    same_domain = [
        [hit["metadata"]["domain"] == domain for hit in result["hits"]]
        for result, domain in zip(coarse, query_domains, strict=True)
    ]

    def recall(approx: list[dict]) -> float:
        pairs = zip(approx, exact, strict=True)
        return float(np.mean([len(ids(a) & ids(e)) / K for a, e in pairs]))

    picked_fine = np.mean([r["route"]["granularity"] == "fine" for r in auto_fine])
    picked_coarse = np.mean([r["route"]["granularity"] == "coarse" for r in auto_coarse])
    return {
        "bundle": str(bundle),
        "bundle_objective": info.get("manifest", {}).get("objective"),
        "documents": len(docs),
        "queries": len(queries),
        "ingest_seconds": ingest_seconds,
        "coarse_dimension": coarse[0]["route"]["dimension"],
        "fine_dimension": exact[0]["route"]["dimension"],
        "coarse_hit_domain_precision": float(np.mean([np.mean(row) for row in same_domain])),
        "coarse_all_ten_same_domain": float(np.mean([all(row) for row in same_domain])),
        "c2f_recall_at_10": {factor: recall(results) for factor, results in c2f.items()},
        "hnsw_fine_recall_at_10": recall(hnsw),
        "auto_fine_queries_routed_fine": float(picked_fine),
        "auto_coarse_queries_routed_coarse": float(picked_coarse),
        "auto_accuracy_50_50": float((picked_fine + picked_coarse) / 2),
        "mixed_workload_size_per_kind": mixed_size,
    }


def markdown(record: dict, smoke: bool) -> str:
    rows = [
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
    lines = [
        f"# Service quality through HTTP{' (smoke run)' if smoke else ''}",
        "",
        f"Bundle: `{record['bundle']}` ({record['bundle_objective']}). Corpus: "
        f"{record['documents']} CLINC-150 training utterances ingested through `POST /documents` "
        f"in {record['ingest_seconds']:.0f} s. Queries: {record['queries']} CLINC-150 test "
        f"utterances through `POST /search`, k = {K}. Coarse = {record['coarse_dimension']}d, "
        f"fine = {record['fine_dimension']}d; C2F shortlists k' = k × factor at the coarse "
        "prefix and re-ranks exactly at the fine one. "
        f"Mixed workload: {record['mixed_workload_size_per_kind']} queries of each kind.",
        "",
        f"Command: `{record['command']}`",
        "",
        "| measure | target | reached | met |",
        "|---|---|---|---|",
    ]
    for name, target, value, met in rows:
        verdict = "" if met is None else ("yes" if met else "**no**")
        lines.append(f"| {name} | {target} | {value:.3f} | {verdict} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", type=Path, help="a V5 CLINC-150 bundle (fractal run …)")
    parser.add_argument("--smoke", action="store_true", help="a small run (needs --bundle)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--tag", default="", help="added to the result file names")
    args = parser.parse_args()
    if args.bundle is None:
        parser.error(
            "--bundle is required: make one with `fractal run --dataset clinc150 --out DIR`"
        )
    sizes = (600, 100, 50) if args.smoke else (None, 2000, 500)
    record = measure(args.bundle, *sizes)
    record["command"] = "python benchmarks/service_quality.py " + " ".join(sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = (f"_{args.tag}" if args.tag else "") + ("_smoke" if args.smoke else "")
    (args.out / f"service_quality{suffix}.json").write_text(json.dumps(record, indent=2))
    (args.out / f"service_quality{suffix}.md").write_text(markdown(record, args.smoke))
    print(markdown(record, args.smoke))


if __name__ == "__main__":
    main()
