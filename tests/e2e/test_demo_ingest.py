"""``fractal ingest``: the demo corpus reaches a real service over HTTP, labels as metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.cli import main


def test_ingest_sends_a_split_as_documents(
    launch, identity_bundle_dir: Path, tmp_path: Path
) -> None:
    server = launch(identity_bundle_dir, tmp_path / "index")
    code = main(["ingest", "--url", server.base_url, "--dataset", "clinc150",
                 "--max-texts", "40", "--batch-size", "16", "--no-progress"])  # fmt: skip
    assert code == 0
    with server.client() as client:
        assert client.get("/info").json()["documents"] == 40
        document = client.get("/documents/clinc150-train-0").json()
        assert set(document["metadata"]) == {"domain", "intent"}
        hits = client.get("/search", params={"q": document["text"], "k": 1}).json()["hits"]
        assert hits[0]["id"] == "clinc150-train-0"


def test_ingest_without_a_service_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["ingest", "--url", "http://127.0.0.1:9", "--max-texts", "5", "--wait", "1"])
    assert code == 2
    assert "no ready Fractal service at http://127.0.0.1:9" in capsys.readouterr().err
