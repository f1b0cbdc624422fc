"""``fractal ingest FILE``: a user's corpus reaches a real service over HTTP. Bad rows are reported
by line (Parquet: row) while the good ones are stored; ``--resume`` after ``kill -9`` sends only
what is missing; ``--create`` makes a missing collection; bad command lines end with one
``error:`` line and exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.harness.processes import ROOT, ServiceProcess
from client import FractalClient
from tests.bulk.helpers import assert_one_error, run_cli
from tests.servers import GRACEFUL_EXITS, start_server

ROWS = 10_000
BAD_LINES = {17: '{"id": "doc-16", "text": ', 512: '{"id": "doc-511", "text": "  "}'}
BAD_LINES[9_001] = '{"id": "doc-9000", "text": "fine", "metadata": [1, 2]}'
GOOD_IDS = [f"doc-{i}" for i in range(ROWS) if i + 1 not in BAD_LINES]
KILL_AFTER_DOCUMENTS = 1_000
KILL_TIMEOUT_S = 120.0


def _document(i: int) -> dict:
    topics = ("banking", "travel", "music", "cooking", "weather")
    return {
        "id": f"doc-{i}",
        "text": f"note {i}: a question about {topics[i % 5]} number {i * 7919 % 10007}",
        "metadata": {"topic": topics[i % 5], "n": i},
    }


def _big_corpus(path: Path) -> Path:
    """``ROWS`` lines, three of them bad (``BAD_LINES``, by line number)."""
    lines = [BAD_LINES.get(i + 1) or json.dumps(_document(i)) for i in range(ROWS)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def server(tiny_bundle_dir: Path, tmp_path: Path) -> Iterator[ServiceProcess]:
    service = start_server(tiny_bundle_dir, tmp_path / "index", tmp_path / "service.log")
    try:
        yield service
    finally:
        if service.process.poll() is None:
            service.kill()


def _documents(service: ServiceProcess) -> int:
    return httpx.get(f"{service.base_url}/info", timeout=30).json()["documents"]


def _expected_summary(stored: int, skipped: int | None = None) -> str:
    skip = "" if skipped is None else f", skipped {skipped:,} already stored"
    return f"stored {stored:,}{skip}, rejected 3: lines 17, 512, 9,001"


def _check_store(service: ServiceProcess) -> None:
    """Every good row is stored once, with its text and metadata; no bad row is."""
    assert _documents(service) == len(GOOD_IDS)
    with FractalClient(service.base_url) as client:
        assert client.lookup(GOOD_IDS) == set(GOOD_IDS)
        assert client.lookup(["doc-16", "doc-511", "doc-9000"]) == set()
        for i in (0, 15, 17, 4_999, ROWS - 1):
            stored = client.request("GET", f"/documents/doc-{i}").json()
            assert stored == _document(i)


def test_a_corpus_with_three_bad_lines_stores_the_others(
    capsys: pytest.CaptureFixture[str], server: ServiceProcess, tmp_path: Path
) -> None:
    corpus = _big_corpus(tmp_path / "corpus.jsonl")
    rejects = tmp_path / "rejects.jsonl"
    status, out, err = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--no-progress", "--rejects", rejects
    )
    assert status == 1, err
    assert out.strip().splitlines()[-1] == _expected_summary(len(GOOD_IDS))
    assert err.strip().splitlines() == [
        f"{corpus}, line 17: not valid JSON (Expecting value at column 26)",
        f"{corpus}, line 512: the text is missing, empty or not a string ('  ')",
        f"{corpus}, line 9001: the metadata is not a JSON object ([1, 2])",
    ]
    listed = [json.loads(line) for line in rejects.read_text(encoding="utf-8").splitlines()]
    assert [(entry["line"], entry["id"]) for entry in listed] == [
        (17, None),
        (512, "doc-511"),
        (9001, "doc-9000"),
    ]
    _check_store(server)
    assert server.stop() in GRACEFUL_EXITS


def test_resume_after_kill_sends_only_what_is_missing(
    capsys: pytest.CaptureFixture[str], server: ServiceProcess, tmp_path: Path
) -> None:
    corpus = _big_corpus(tmp_path / "corpus.jsonl")
    command = [sys.executable, "-m", "training.cli", "ingest", str(corpus)]
    command += ["--url", server.base_url, "--batch-size", "50", "--no-progress"]
    ingest = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while _documents(server) < KILL_AFTER_DOCUMENTS and time.monotonic() < deadline:
            time.sleep(0.01)
        still_running = ingest.poll() is None
        ingest.kill()
    finally:
        ingest.wait(30)
    assert still_running and ingest.returncode == -9, "the ingest ended before the kill"
    acknowledged = _documents(server)
    assert KILL_AFTER_DOCUMENTS <= acknowledged < len(GOOD_IDS)

    status, out, err = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--resume", "--no-progress"
    )
    assert status == 1, err
    expected = _expected_summary(len(GOOD_IDS) - acknowledged, skipped=acknowledged)
    assert out.strip().splitlines()[-1] == expected
    _check_store(server)

    # A second resume has nothing left to send.
    status, out, _ = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--resume", "--no-progress"
    )
    assert status == 1
    assert out.strip().splitlines()[-1] == _expected_summary(0, skipped=len(GOOD_IDS))
    assert server.stop() in GRACEFUL_EXITS


def _write_csv(path: Path, delimiter: str, rows: list[list[str]]) -> Path:
    path.write_text("".join(delimiter.join(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _csv(path: Path) -> tuple[Path, list[str], dict[str, dict]]:
    rows = [["key", "body", "lang", "source"], ["a", "move funds to savings", "en", "faq"]]
    rows += [["b", "", "fr", "faq"], ["c", "réserver une table", "fr", "web"]]
    options = ["--id-column", "key", "--text-column", "body", "--metadata-columns", "lang"]
    expected = {"a": {"lang": "en"}, "c": {"lang": "fr"}}
    return _write_csv(path / "corpus.csv", ",", rows), options, expected


def _tsv(path: Path) -> tuple[Path, list[str], dict[str, dict]]:
    rows = [["id", "text", "lang", "metadata"], ["a", "move funds to savings", "en", ""]]
    rows += [["b", "", "fr", ""], ["c", "réserver une table", "fr", '{"src": "web", "n": 2}']]
    expected = {"a": {"lang": "en"}, "c": {"src": "web", "n": 2, "lang": "fr"}}
    return _write_csv(path / "corpus.tsv", "\t", rows), [], expected


def _parquet(path: Path) -> tuple[Path, list[str], dict[str, dict]]:
    table = pa.table(
        {
            "doc": ["a", "b", "c"],
            "content": ["move funds to savings", None, "réserver une table"],
            "score": [0.5, 1.0, 2.0],
            "tags": [["x"], [], ["y", "z"]],
        }
    )
    pq.write_table(table, path / "corpus.parquet")
    expected = {"a": {"score": 0.5, "tags": ["x"]}, "c": {"score": 2.0, "tags": ["y", "z"]}}
    return path / "corpus.parquet", ["--id-column", "doc", "--text-column", "content"], expected


@pytest.mark.parametrize(
    ("make", "rejected"),
    [(_csv, "line 3"), (_tsv, "line 3"), (_parquet, "row 2")],
    ids=["csv", "tsv", "parquet"],
)
def test_csv_tsv_and_parquet_corpora_with_their_own_column_names(
    capsys: pytest.CaptureFixture[str],
    server: ServiceProcess,
    tmp_path: Path,
    make: Callable[[Path], tuple[Path, list[str], dict[str, dict]]],
    rejected: str,
) -> None:
    corpus, options, expected = make(tmp_path)
    status, out, err = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--no-progress", *options
    )
    assert status == 1, err
    assert out.strip() == f"stored 2, rejected 1: {rejected}"
    assert err.startswith(f"{corpus}, {rejected}: the text is missing, empty or not a string")
    with FractalClient(server.base_url) as client:
        for doc_id, metadata in expected.items():
            assert client.request("GET", f"/documents/{doc_id}").json()["metadata"] == metadata
        assert client.lookup(["a", "b", "c"]) == {"a", "c"}


def test_rows_the_service_or_json_refuse_are_found_in_their_batch(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, tmp_path: Path, launch
) -> None:
    server = launch(tiny_bundle_dir, tmp_path / "index", max_chars="100")
    lines = [
        '{"id": "a", "text": "first"}',
        json.dumps({"id": "long-text", "text": "x" * 150}),
        '{"id": "b", "text": "second"}',
        json.dumps({"id": "i" * 300, "text": "an id over 256 characters"}),
        '{"id": "a", "text": "a repeated id"}',
        '{"id": "nan", "text": "bad metadata", "score": NaN}',
        '{"id": "surrogate", "text": "lone \\ud800 surrogate"}',
        '{"id": "c", "text": "third"}',
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    status, out, err = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--resume", "--no-progress"
    )
    assert status == 1, err
    assert out.strip() == "stored 3, skipped 0 already stored, rejected 5: lines 2, 4, 5, 6, 7"
    reasons = sorted(err.strip().splitlines())
    assert reasons == [
        f"{corpus}, line 2: the service refused it: text has 150 characters; the limit is 100",
        f"{corpus}, line 4: the service refused it: id has 300 characters; the limit is 256",
        f"{corpus}, line 5: id 'a' repeats line 1",
        f"{corpus}, line 6: the metadata holds NaN or infinity, which JSON cannot carry",
        f"{corpus}, line 7: holds a lone surrogate, which is not valid Unicode",
    ]
    with FractalClient(server.base_url) as client:
        assert client.request("GET", "/documents/a").json()["text"] == "first"
        assert client.info()["documents"] == 3


def test_a_batch_over_the_body_limit_is_split_until_the_culprit_is_alone(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, tmp_path: Path, launch
) -> None:
    server = launch(tiny_bundle_dir, tmp_path / "index", max_body_bytes="2000")
    rows = [{"id": f"d{i}", "text": f"short text {i}"} for i in range(10)]
    rows.insert(6, {"id": "huge", "text": "y" * 2500})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    status, out, err = run_cli(capsys, "ingest", corpus, "--url", server.base_url, "--no-progress")
    assert status == 1, err
    assert out.strip() == "stored 10, rejected 1: line 7"
    assert err.strip() == (
        f"{corpus}, line 7: the service refused it: "
        "the request body is larger than the limit of 2000 bytes"
    )


def test_overload_answers_are_retried_and_nothing_is_lost(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, tmp_path: Path, launch
) -> None:
    server = launch(tiny_bundle_dir, tmp_path / "index", max_texts="16", queue_depth="16")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(_document(i)) + "\n" for i in range(400)), "utf-8")
    status, out, err = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--batch-size", "16",
        "--concurrency", "6", "--no-progress",
    )  # fmt: skip
    assert (status, out.strip()) == (0, "stored 400, rejected 0"), err
    metrics = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    refusals = 'fractal_errors_total{kind="overloaded"} '
    overloaded = [line for line in metrics.splitlines() if line.startswith(refusals)]
    assert overloaded and float(overloaded[0].split()[-1]) > 0, "no request got a 429"
    assert _documents(server) == 400


def test_a_clean_corpus_exits_zero(
    capsys: pytest.CaptureFixture[str], server: ServiceProcess, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "hello"}) + "\n", encoding="utf-8")
    status, out, err = run_cli(capsys, "ingest", corpus, "--url", server.base_url)
    assert (status, out.strip()) == (0, "stored 1, rejected 0"), err
    status, out, err = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--batch-size", "129"
    )
    assert_one_error(status, err, "--batch-size 129 is over the service's limit of 128")


def test_a_corpus_goes_to_a_named_collection_and_resumes_there(
    capsys: pytest.CaptureFixture[str], server: ServiceProcess, tmp_path: Path
) -> None:
    corpus = tmp_path / "news.jsonl"
    rows = [{"id": f"n{i}", "text": f"market report number {i}"} for i in range(30)]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    args = ["ingest", corpus, "--url", server.base_url, "--collection", "news"]
    status, _, err = run_cli(capsys, *args)
    assert_one_error(status, err, "has no collection 'news'", "add --create to create it")
    with httpx.Client(base_url=server.base_url) as http:
        assert http.post("/collections", json={"name": "news"}).status_code == 201
        status, out, err = run_cli(capsys, *args, "--batch-size", "7")
        assert (status, out.strip()) == (0, "stored 30, rejected 0"), err
        status, out, err = run_cli(capsys, *args, "--resume")
        assert (status, out.strip()) == (0, "stored 0, skipped 30 already stored, rejected 0"), err
        listed = {c["name"]: c["documents"] for c in http.get("/collections").json()["collections"]}
        assert listed["news"] == 30
        assert http.get("/documents/n0").status_code == 404  # not in the default collection
        assert http.get("/collections/news/documents/n0").json()["text"] == "market report number 0"
        http.request("DELETE", "/collections/news", json={"name": "news"})


def _collections(http: httpx.Client) -> dict[str, tuple[list[str], int]]:
    listed = http.get("/collections").json()["collections"]
    return {c["name"]: (c["index_kinds"], c["documents"]) for c in listed}


def test_create_makes_the_missing_collection_with_the_service_defaults_or_given_kinds(
    capsys: pytest.CaptureFixture[str], server: ServiceProcess, tmp_path: Path
) -> None:
    corpus = tmp_path / "news.jsonl"
    rows = [{"id": f"n{i}", "text": f"market report number {i}"} for i in range(30)]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    ingest = ["ingest", corpus, "--url", server.base_url, "--no-progress"]
    with httpx.Client(base_url=server.base_url) as http:
        default_kinds = _collections(http)["default"][0]  # FRACTAL_INDEX_KINDS
        status, out, err = run_cli(capsys, *ingest, "--collection", "news", "--create")
        assert status == 0, err
        assert out.strip().splitlines() == [
            f"created the collection 'news' (index kinds {','.join(default_kinds)})",
            "stored 30, rejected 0",
        ]
        assert _collections(http)["news"] == (default_kinds, 30)
        # It exists now: --create changes nothing, and --resume finds everything stored.
        status, out, err = run_cli(capsys, *ingest, "--collection", "news", "--create", "--resume")
        assert (status, out.strip()) == (0, "stored 0, skipped 30 already stored, rejected 0"), err

        status, out, err = run_cli(
            capsys, *ingest, "--collection", "faq", "--create", "--index-kinds", "exact"
        )
        assert status == 0, err
        assert out.strip().splitlines()[0] == "created the collection 'faq' (index kinds exact)"
        assert _collections(http)["faq"] == (["exact"], 30)
        params = {"q": "market report", "k": 5, "collection": "faq"}
        found = http.get("/search", params=params).json()
        assert found["route"]["index"] == "exact" and len(found["hits"]) == 5

        refusals = [
            (["faq", "--index-kinds", "hnsw"], "exists with the index kinds exact, not hnsw"),
            (["other", "--index-kinds", "pq"], "cannot create the collection 'other': index_kinds"),
            (["other", "--index-kinds", "exact,bogus"], "cannot create the collection 'other'"),
            (["Not A Name"], "cannot create the collection 'Not A Name': name"),
            (["other", "--batch-size", "129"], "--batch-size 129 is over the service's limit"),
        ]
        for argv, message in refusals:
            status, _, err = run_cli(capsys, *ingest, "--create", "--collection", *argv)
            assert_one_error(status, err, message)
        assert set(_collections(http)) == {"default", "news", "faq"}
        assert _collections(http)["faq"] == (["exact"], 30)


def test_create_needs_a_key_that_may_create_the_collection(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, tmp_path: Path, launch
) -> None:
    writer, admin = "ingest-writer-key-0000001", "ingest-admin-key-00000001"
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"{writer} write news\n{admin} admin news\n", encoding="utf-8")
    server = launch(tiny_bundle_dir, tmp_path / "index", api_keys_file=str(key_file))
    corpus = tmp_path / "news.jsonl"
    corpus.write_text(json.dumps({"id": "n0", "text": "market report"}) + "\n", encoding="utf-8")
    ingest = ["ingest", corpus, "--url", server.base_url, "--collection", "news", "--create"]
    status, _, err = run_cli(capsys, *ingest, "--api-key", writer)
    assert_one_error(
        status, err, "cannot create the collection 'news'", "does not allow admin", "'news'"
    )
    status, out, err = run_cli(capsys, *ingest, "--api-key", admin, "--no-progress")
    assert status == 0, err
    assert out.strip().splitlines()[-1] == "stored 1, rejected 0"
    status, out, err = run_cli(capsys, *ingest, "--api-key", writer, "--no-progress")
    assert (status, out.strip()) == (0, "stored 1, rejected 0"), err


NO_SERVICE = ["--url", "http://127.0.0.1:9", "--wait", "1"]


@pytest.mark.parametrize(
    ("files", "argv", "message"),
    [
        ({}, ["missing.jsonl"], "missing.jsonl: no such file"),
        ({"c.csv": "id,body\na,hi\n"}, ["c.csv"], "no text column 'text' (columns: id, body)"),
        ({"c.jsonl": '{"text": "hi"}\n'}, ["c.jsonl"], "no id column 'id'"),
        ({"c.jsonl": '{"id": 1, "text": "hi"}\n'}, ["c.jsonl", "--metadata-columns", "x"],
         "no metadata column(s) 'x'"),
        ({"c.jsonl": ""}, ["c.jsonl"], "the corpus holds no documents"),
        ({"c.txt": "hi\n"}, ["c.txt"], "fractal ingest reads .jsonl, .csv, .tsv or .parquet"),
        ({"c.xml": "<a/>"}, ["c.xml"], "unknown corpus format '.xml'"),
        ({"c.jsonl": ""}, ["c.jsonl", "--dataset", "clinc150"], "FILE or --dataset, not both"),
        ({}, ["--dataset", "clinc150", "--resume"], "--resume cannot be used with --dataset"),
        ({"c.jsonl": ""}, ["c.jsonl", "--split", "test"], "--split cannot be used with a corpus"),
        ({"c.jsonl": ""}, ["c.jsonl", "--batch-size", "0"], "--batch-size must be at least 1"),
        ({"c.jsonl": '{"id": 1, "text": "hi"}\n'}, ["c.jsonl", "--rejects", "no/such/dir.jsonl"],
         "--rejects no/such/dir.jsonl: cannot write it"),
        ({"c.jsonl": ""}, ["c.jsonl", "--create"], "--create needs --collection"),
        ({"c.jsonl": ""}, ["c.jsonl", "--collection", "c", "--index-kinds", "exact"],
         "--index-kinds applies to a collection --create makes"),
        ({"c.jsonl": ""}, ["c.jsonl", "--collection", "c", "--create", "--index-kinds", ","],
         "--index-kinds names no index kind"),
        ({}, ["--dataset", "clinc150", "--create"], "--create needs --collection"),
    ],
)  # fmt: skip
def test_bad_command_lines_end_with_one_error_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str],
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, content in files.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    status, _, err = run_cli(capsys, "ingest", *argv, *NO_SERVICE)
    assert_one_error(status, err, message)
