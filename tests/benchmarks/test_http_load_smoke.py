"""The HTTP load test: its corpus, and a smoke run against the real service (no timings)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.harness.live_load import WORKLOADS, corpus
from benchmarks.http_load import SMOKE
from tests.benchmarks.smoke import run_smoke
from tests.servers import require_binary
from tests.service.bundles import v5_bundle


def test_corpus_is_topped_up_with_distinct_composed_documents_and_holds_queries_out() -> None:
    texts, sources, queries, description = corpus(replace(SMOKE, documents=60_000, queries=300))
    assert len(texts) == len(sources) == 60_000 and len(queries) == 300
    assert len(set(texts)) == len(texts), "every document is distinct"
    assert not set(queries) & set(texts), "queries are held out of the corpus"
    real, composed = description["real_sentences"], description["composed_documents"]
    assert real + composed == 60_000 and composed > 0  # the data folder has fewer sentences
    assert sources[real:] == ["composed"] * composed
    assert "composed" not in sources[:real]
    assert all(" " in text for text in texts[real:])


def test_corpus_rejects_more_queries_than_there_are_test_utterances() -> None:
    with pytest.raises(SystemExit, match="at most"):
        corpus(replace(SMOKE, queries=10**6))


@pytest.mark.parametrize("generator", ["wrk", "python"])
def test_http_load_smoke_run(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, generator: str
) -> None:
    if generator == "wrk":
        require_binary("wrk")
    settings = replace(SMOKE, documents=200)
    bundle = str(v5_bundle(tmp_path_factory))
    paths, _ = run_smoke(
        "http_load", tmp_path, "--bundle", bundle, "--documents", "200", "--generator", generator
    )
    assert sorted(path.name for path in paths) == [
        f"http_load_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    report = json.loads((tmp_path / "http_load_smoke.json").read_text(encoding="utf-8"))

    assert report["generator"] == generator
    assert report["corpus"]["documents"] == 200
    assert report["service"]["bundle_objective"] == "v5"
    assert {index["vectors"] for index in report["service"]["indexes"]} == {200}
    names = {w.name for w in WORKLOADS} | {"openai"}
    cells = {(row["workload"], row["concurrency"]) for row in report["rows"]}
    assert cells == {(name, c) for name in names for c in settings.concurrency}
    for row in report["rows"]:
        assert row["failed"] == 0 and row["ok"] == row["requests"] > 0, row
        assert 0 < row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"]
        server = row["server"]
        assert server["texts_per_encode_call"] >= 1, row  # every request encodes its text
        assert (server["search_ms"] is None) == (row["workload"] in ("embed", "openai")), row
        assert (row["service_cpu_ms"] is None) == (generator == "python"), row
        assert row["service_cpu_ms"] is None or row["service_cpu_ms"] > 0, row
    assert set(report["recall_at_10"]) == {"coarse", "fine", "c2f"}
    assert all(0.0 <= value <= 1.0 for value in report["recall_at_10"].values())
    overhead = report["service_overhead"]
    assert overhead["encoder_texts_per_second"] > 0
    assert set(overhead["ratio"]) == names
    assert len(report["targets"]) == 7
    servers = report["embedding_servers"]
    assert [(r["server"], r["texts"], r["connections"]) for r in servers["rows"]] == [
        ("Fractal fp32", 1, 1),
        ("Fractal fp32", 4, 2),
    ]
    for row in servers["rows"]:
        assert row["failed"] == 0 and row["ok"] == row["requests"] > 0, row
        assert row["texts_per_second"] == pytest.approx(row["qps"] * row["texts"])
    assert servers["infinity"] == {"measured": False, "why_not": "--infinity no"}
    assert servers["over_infinity"] == {"fp32": {}, "int8": {}}
    infinity_target = report["targets"][-1]
    assert infinity_target["met"] is False
    assert infinity_target["reached"] == "not measured: --infinity no"
    for entry in report["search_cpu"]:
        beyond = entry["beyond_openai_ms"]
        assert set(beyond) == {"coarse", "fine", "c2f"}
        assert all((value is None) == (generator == "python") for value in beyond.values())
    markdown = (tmp_path / "http_load_smoke.md").read_text(encoding="utf-8")
    for section in (
        "## Targets",
        "## Service overhead",
        "## CPU per request",
        "## Coarse versus fine",
        "## Embedding servers side by side",
    ):
        assert section in markdown
