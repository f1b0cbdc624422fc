"""The service on a tiered layout: an index at the coarse prefix only, the full vectors on disk
(float16), fine queries answered by C2F, and the layout's settings checked at start."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from service.settings import Settings
from tests.service.helpers import add_documents, serve

TEXTS = [f"document number {i} about topic {i % 7} and colour {i % 5}" for i in range(120)]


def test_fine_queries_go_through_c2f_when_the_fine_prefix_has_no_index(
    tiny_bundle_dir: Path, settings_for: Callable[..., Settings]
) -> None:
    settings = settings_for(
        tiny_bundle_dir,
        index_kinds="exact",
        fine_index_kinds="none",
        full_vectors_dtype="float16",
        c2f_factor=20,
        max_k=20,
    )
    with serve(settings) as client:
        add_documents(client, TEXTS)
        info = client.get("/info").json()
        granularity = info["resolutions"]["granularity"]
        coarse, fine = granularity["coarse"], granularity["fine"]
        assert [(i["dimension"], i["kind"]) for i in info["indexes"]] == [(coarse, "exact")]
        body = client.get("/search", params={"q": TEXTS[3], "granularity": "fine", "k": 5}).json()
        route = body["route"]
        assert route["rerank"] == "c2f" and route["dimension"] == fine
        assert route["shortlist_dimension"] == coarse and route["shortlist_k"] == 100
        # The shortlist (100 of 120) holds the true top 5; the re-rank reads float16 vectors.
        vectors = np.array(
            [
                item["embeddings"][0]["vector"]
                for item in client.post(
                    "/embed", json={"texts": [TEXTS[3], *TEXTS], "normalize": True}
                ).json()["data"]
            ]
        )
        scores = vectors[1:] @ vectors[0]
        expected = [f"{i}" for i in np.argsort(-scores, kind="stable")[:5]]
        positions = [str(match["metadata"]["position"]) for match in body["hits"]]
        assert positions == expected
        np.testing.assert_allclose(
            [match["score"] for match in body["hits"]], np.sort(scores)[::-1][:5], atol=2e-3
        )
        refused = client.get("/search", params={"q": "x", "granularity": "fine", "scoring": "sfs"})
        assert refused.status_code == 422


@pytest.mark.parametrize(
    "overrides, variable",
    [
        ({"fine_index_kinds": "hnsw,hnsw"}, "fine_index_kinds"),
        ({"fine_index_kinds": "ivf"}, "fine_index_kinds"),
        ({"full_vectors_dtype": "int8"}, "full_vectors_dtype"),
        ({"hnsw_storage": "pq"}, "hnsw_storage"),
    ],
)
def test_bad_layout_settings_are_refused_naming_the_variable(
    tiny_bundle_dir: Path, tmp_path: Path, overrides: dict, variable: str
) -> None:
    with pytest.raises(ValidationError, match=variable):
        Settings(bundle_dir=tiny_bundle_dir, index_dir=tmp_path, **overrides)
