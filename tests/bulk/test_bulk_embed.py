"""``fractal embed``: shards from every corpus format, float16 and float32, the vectors the
bundle's encoder gives, resuming, and bad input (one ``error:`` line, exit status 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bulk.embed import RUN_FILE
from bulk.shards import read_shard, shard_name
from bundle import load_bundle
from encoding.encoder import OnnxEncoder
from tests.bulk.helpers import TEXTS, assert_one_error, run_cli, write_jsonl

REPOSITORY = Path(__file__).parents[2]


def _embed(capsys, corpus: Path, bundle: Path, out: Path, *options: object):
    return run_cli(
        capsys,
        "embed",
        corpus,
        "--bundle",
        bundle,
        "--out",
        out,
        "--workers",
        1,
        "--no-progress",
        *options,
    )


def _shards(out: Path, bundle: Path) -> list:
    manifest = load_bundle(bundle)
    return [read_shard(path, manifest) for path in sorted(out.glob("shard-*.parquet"))]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_shards_hold_the_encoders_vectors_in_corpus_order(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, tmp_path: Path, dtype: str
) -> None:
    rows = [{"id": f"d{i}", "text": text, "n": i} for i, text in enumerate(TEXTS)]
    corpus = write_jsonl(tmp_path / "c.jsonl", rows)
    status, out, err = _embed(
        capsys, corpus, tiny_bundle_dir, tmp_path / "out", "--shard-size", 4, "--dtype", dtype
    )
    assert status == 0, err
    assert "embedded 10 documents into 3 shards" in out
    shards = _shards(tmp_path / "out", tiny_bundle_dir)
    manifest = load_bundle(tiny_bundle_dir)
    assert [(s.header.start, s.header.rows, s.header.dtype) for s in shards] == [
        (0, 4, dtype),
        (4, 4, dtype),
        (8, 2, dtype),
    ]
    assert {s.header.bundle_hash for s in shards} == {manifest.content_hash}
    assert [doc_id for s in shards for doc_id in s.ids] == [row["id"] for row in rows]
    assert [m for s in shards for m in s.metadata] == [{"n": i} for i in range(len(TEXTS))]
    expected = OnnxEncoder(tiny_bundle_dir, manifest, threads=1).encode(TEXTS).vectors
    vectors = np.concatenate([s.vectors for s in shards])
    tolerance = 1e-3 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(vectors, expected, rtol=tolerance, atol=tolerance)
    run = (tmp_path / "out" / RUN_FILE).read_text(encoding="utf-8")
    assert '"rows": 10' in run and f'"dtype": "{dtype}"' in run


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet", ".txt"])
def test_every_corpus_format_embeds(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, tmp_path: Path, suffix: str
) -> None:
    corpus = tmp_path / f"c{suffix}"
    if suffix == ".parquet":
        pq.write_table(pa.table({"text": TEXTS[:3]}), corpus)
    elif suffix == ".txt":
        corpus.write_text("\n".join(TEXTS[:3]) + "\n", encoding="utf-8")
    else:
        corpus.write_text("text\n" + "\n".join(TEXTS[:3]) + "\n", encoding="utf-8")
    status, _, err = _embed(capsys, corpus, tiny_bundle_dir, tmp_path / "out")
    assert status == 0, err
    (shard,) = _shards(tmp_path / "out", tiny_bundle_dir)
    assert shard.texts == TEXTS[:3] and shard.ids == ["1", "2", "3"]


def test_a_rerun_skips_finished_shards_and_redoes_a_damaged_one(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": text} for text in TEXTS])
    out = tmp_path / "out"
    assert _embed(capsys, corpus, tiny_bundle_dir, out, "--shard-size", 4)[0] == 0
    before = {path.name: path.read_bytes() for path in out.glob("shard-*.parquet")}
    damaged = out / shard_name(1)
    damaged.write_bytes(before[damaged.name][: len(before[damaged.name]) // 2])
    (out / shard_name(2)).unlink()
    (out / f".{shard_name(2)}.tmp-1").write_bytes(b"left by a killed run")

    status, stdout, err = _embed(capsys, corpus, tiny_bundle_dir, out, "--shard-size", 4)
    assert status == 0, err
    assert "(1 already done and skipped, 1 redone)" in stdout
    assert f"redoing {shard_name(1)}" in err
    after = {path.name: path.read_bytes() for path in out.glob("shard-*.parquet")}
    assert after.keys() == before.keys()
    assert after[shard_name(0)] == before[shard_name(0)]
    assert [s.texts for s in _shards(out, tiny_bundle_dir)] == [TEXTS[:4], TEXTS[4:8], TEXTS[8:]]

    # Another dtype or another slicing of the corpus is not "finished".
    status, stdout, _ = _embed(
        capsys, corpus, tiny_bundle_dir, out, "--shard-size", 4, "--dtype", "float32"
    )
    assert status == 0 and "(0 already done and skipped, 3 redone)" in stdout


BAD_CORPORA = [
    ("empty.jsonl", "", "holds no documents"),
    ("header.csv", "id,body\na,hello\n", "no text column 'text'"),
    ("rows.jsonl", '{"text": "a"}\n{"text": \n', "line 2: not valid JSON"),
    ("twice.jsonl", '{"id": "x", "text": "a"}\n{"id": "x", "text": "b"}\n', "line 2: id 'x'"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_CORPORA)
def test_bad_corpora_end_with_one_error_line(
    capsys: pytest.CaptureFixture[str],
    tiny_bundle_dir: Path,
    tmp_path: Path,
    name: str,
    content: str,
    message: str,
) -> None:
    corpus = tmp_path / name
    corpus.write_text(content, encoding="utf-8")
    status, _, err = _embed(capsys, corpus, tiny_bundle_dir, tmp_path / "out")
    assert_one_error(status, err, str(corpus), message)
    assert not list((tmp_path / "out").glob("*.parquet"))


def test_an_unreadable_corpus_and_bad_options_end_with_one_error_line(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.jsonl"
    assert_one_error(
        *_embed(capsys, missing, tiny_bundle_dir, tmp_path / "out")[::2],
        str(missing),
        "cannot read the corpus",
    )
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": "a"}])
    status, _, err = _embed(capsys, corpus, tiny_bundle_dir, tmp_path / "out", "--shard-size", 0)
    assert_one_error(status, err, "--shard-size must be at least 1")



def test_embed_loads_neither_the_http_stack_nor_redis(
    tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    """``fractal embed`` runs the encoder without the service: after a whole run through
    ``fractal``'s entry point, in a fresh process, no FastAPI, Starlette, Redis or ``service``
    module is loaded."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": text} for text in TEXTS[:3]])
    argv = ["embed", str(corpus), "--bundle", str(tiny_bundle_dir), "--out", str(tmp_path / "out"),
            "--workers", "1", "--no-progress"]  # fmt: skip
    code = (
        "import sys; from training.cli import main; status = main(" + repr(argv) + "); "
        "print(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'fastapi', 'starlette', 'redis', 'service'})); sys.exit(status)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "embedded 3 documents into 1 shards" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"
