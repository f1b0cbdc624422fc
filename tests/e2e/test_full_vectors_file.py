"""The full vectors' file through the real service: a restart maps it, a corrupted one is
caught by its checksum at start and rebuilt from the store, with the same search results, and
the rebuild is snapshotted at shutdown though nothing was written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from benchmarks.harness.processes import ServiceProcess
from index.embedded.vector_file import VectorFile
from tests.servers import GRACEFUL_EXITS

SETTINGS = {
    "index_kinds": "hnsw",
    "fine_index_kinds": "none",
    "full_vectors_dtype": "float16",
    "c2f_factor": "8",
}
TEXTS = [f"note {i}: the {['red', 'green', 'blue'][i % 3]} box number {i % 11}" for i in range(90)]
QUERIES = ["a red box", "box number 7", "green note"]


def _fine_hits(client: httpx.Client) -> list[list[str]]:
    response = client.post("/search", json={"queries": QUERIES, "k": 5, "granularity": "fine"})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert all(result["route"]["rerank"] == "c2f" for result in results)
    return [[hit["id"] for hit in result["hits"]] for result in results]


def _recovery(client: httpx.Client) -> dict:
    return client.get("/info").json()["recovery"]["full_vectors"]


def test_restart_maps_the_file_and_a_corrupted_file_is_rebuilt(
    tiny_bundle_dir: Path, tmp_path: Path, launch: Callable[..., ServiceProcess]
) -> None:
    index_dir = tmp_path / "index"
    server = launch(tiny_bundle_dir, index_dir, **SETTINGS)
    with server.client() as client:
        documents = [{"id": f"n{i}", "text": text} for i, text in enumerate(TEXTS)]
        assert client.post("/documents", json={"documents": documents}).status_code == 200
        before = _fine_hits(client)
        dim = client.get("/info").json()["resolutions"]["dim"]
    assert server.stop() in GRACEFUL_EXITS  # snapshots the indexes and the file's record

    server = launch(tiny_bundle_dir, index_dir, **SETTINGS)
    with server.client() as client:
        assert _recovery(client) == {
            "action": "mapped",
            "reason": None,
            "rows_written": 0,
            "corrupt": [],
        }
        assert _fine_hits(client) == before
    server.kill()

    data = index_dir / "vectors.f16"
    payload = bytearray(data.read_bytes())
    row_10 = VectorFile(index_dir, dim, "float16").data_offset + 10 * dim * 2
    payload[row_10 + 5] ^= 0xFF  # inside row 10, one of the rows the record vouches for
    data.write_bytes(bytes(payload))
    server = launch(tiny_bundle_dir, index_dir, **SETTINGS)
    with server.client() as client:
        recovery = _recovery(client)
        assert recovery["action"] == "rebuilt" and "checksum" in recovery["reason"]
        assert recovery["rows_written"] == len(TEXTS)
        assert _fine_hits(client) == before
    assert server.stop() in GRACEFUL_EXITS  # no write, but the rebuild is snapshotted

    server = launch(tiny_bundle_dir, index_dir, **SETTINGS)
    with server.client() as client:
        assert _recovery(client) == {
            "action": "mapped",
            "reason": None,
            "rows_written": 0,
            "corrupt": [],
        }
