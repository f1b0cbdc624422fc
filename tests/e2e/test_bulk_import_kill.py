"""Durability of ``fractal import``: ``kill -9`` in the middle of importing many shards, then
start the service on the index dir. Every shard reported imported before the kill is there and
searchable, and no shard is partly there: each is one SQLite transaction."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness.processes import ROOT, ServiceProcess, service_environment
from bulk.corpus import Columns
from bulk.embed import EmbedOptions, embed_corpus
from tests.bulk.helpers import write_jsonl
from tests.servers import GRACEFUL_EXITS
from tests.service.bundles import clinc

SHARDS = 60
SHARD_SIZE = 20
REPORTED_BEFORE_KILL = 3
QUERY_BATCH = 100


def test_a_killed_import_leaves_whole_shards_only(
    tiny_bundle_dir: Path, tmp_path: Path, launch: Callable[..., ServiceProcess]
) -> None:
    texts = list(dict.fromkeys(clinc().train.texts))[: SHARDS * SHARD_SIZE]
    ids = [f"doc-{position}" for position in range(len(texts))]
    corpus = write_jsonl(
        tmp_path / "corpus.jsonl", [{"id": i, "text": t} for i, t in zip(ids, texts, strict=True)]
    )
    shards, index_dir = tmp_path / "shards", tmp_path / "index"
    options = EmbedOptions(workers=1, shard_size=SHARD_SIZE, columns=Columns(), progress=False)
    assert len(embed_corpus(corpus, tiny_bundle_dir, shards, options).shards) == SHARDS

    command = [sys.executable, "-m", "training.cli", "import", str(shards)]
    command += ["--bundle", str(tiny_bundle_dir), "--index-dir", str(index_dir)]
    env = service_environment(tiny_bundle_dir, index_dir, port=0)
    importer = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert importer.stdout is not None
    reported: list[int] = []
    for line in importer.stdout:
        if ": imported " in line:
            reported.append(int(line.split("shard-")[1].split(".parquet")[0]))
        if len(reported) == REPORTED_BEFORE_KILL:
            importer.kill()
            break
    importer.wait(30)
    assert importer.returncode == -9, "the import ended before the kill"

    server = launch(tiny_bundle_dir, index_dir)
    with server.client() as client:
        present: list[int] = []
        for shard in range(SHARDS):
            shard_ids = ids[shard * SHARD_SIZE : (shard + 1) * SHARD_SIZE]
            found = {client.get(f"/documents/{doc_id}").status_code for doc_id in shard_ids}
            assert found in ({200}, {404}), f"shard {shard} is partly imported"
            if found == {200}:
                present.append(shard)
        assert set(reported) <= set(present) and len(present) < SHARDS
        visible = [
            position
            for shard in present
            for position in range(shard * SHARD_SIZE, (shard + 1) * SHARD_SIZE)
        ]
        assert client.get("/info").json()["documents"] == len(visible)
        for index in ("exact", "hnsw"):
            for start in range(0, len(visible), QUERY_BATCH):
                batch = visible[start : start + QUERY_BATCH]
                response = client.post(
                    "/search",
                    json={
                        "queries": [texts[p] for p in batch],
                        "k": 1,
                        "granularity": "fine",
                        "index": index,
                    },
                )
                assert response.status_code == 200, response.text
                top = [result["hits"][0]["id"] for result in response.json()["results"]]
                assert top == [ids[p] for p in batch]
    assert server.stop() in GRACEFUL_EXITS
