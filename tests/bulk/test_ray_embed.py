"""``fractal embed --ray``: on a real local Ray cluster (2 CPUs, started once for the module), the
shards equal the single-machine ones byte for byte, a rerun resumes like the local path, the
bundle is copied once per node, and a missing Ray or an unreachable cluster is one ``error:``
line with exit status 2."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bulk.embed import RUN_FILE, EmbedOptions, EmbedSummary, embed_corpus
from bulk.errors import BulkError
from bulk.shards import read_shard, shard_name
from bundle import ENCODER_FILE, TOKENIZER_FILE, Manifest, load_bundle
from tests.bulk.helpers import TEXTS, assert_one_error, run_cli, write_jsonl

REPOSITORY = Path(__file__).resolve().parents[2]
SHARD_ROWS = 100
CPUS = 2


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local 2-CPU Ray cluster for the module; ``--ray`` in this process uses it."""
    pytest.importorskip("ray.data")
    from bulk.ray_embed import LOCAL, cluster

    with cluster(LOCAL, cpus=CPUS):
        yield


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 documents of 1 to 40 words, with ids and metadata: three shards of 100."""
    words = " ".join(TEXTS).split()
    rows = [
        {"id": f"doc-{i}", "text": " ".join(words[i % 17 : i % 17 + 1 + i % 40]), "n": i}
        for i in range(300)
    ]
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "c.jsonl", rows)


@pytest.fixture(scope="module")
def local_out(
    corpus: Path, tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The single-machine path's shards (two worker processes, float32)."""
    out = tmp_path_factory.mktemp("local") / "out"
    options = EmbedOptions(dtype="float32", workers=CPUS, shard_size=SHARD_ROWS, progress=False)
    embed_corpus(corpus, tiny_bundle_dir, out, options)
    return out


def _files(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(out.iterdir())}


def _embed_on_ray(capsys: pytest.CaptureFixture[str], corpus: Path, bundle: Path, out: Path):
    return run_cli(
        capsys, "embed", corpus, "--bundle", bundle, "--out", out, "--dtype", "float32",
        "--shard-size", SHARD_ROWS, "--workers", CPUS, "--no-progress", "--ray",
    )  # fmt: skip


@pytest.fixture(scope="module")
def ray_out(
    ray_cluster: None, corpus: Path, tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, EmbedSummary]:
    """The Ray path's shards (two actors, float32), the nodes' cache folder, and the summary."""
    from bulk.ray_embed import RayEncoders

    work = tmp_path_factory.mktemp("ray")

    def encoders(bundle_dir: Path, manifest: Manifest) -> RayEncoders:
        return RayEncoders(bundle_dir, manifest, actors=CPUS, cache_root=work / "node")

    options = EmbedOptions(dtype="float32", shard_size=SHARD_ROWS, progress=False)
    summary = embed_corpus(corpus, tiny_bundle_dir, work / "out", options, encoders)
    return work / "out", work / "node", summary


def test_ray_shards_equal_the_single_machine_ones_bit_for_bit(
    ray_out: tuple[Path, Path, EmbedSummary], tiny_bundle_dir: Path, local_out: Path
) -> None:
    from bulk.ray_embed import NODE_CACHE

    out, node, summary = ray_out
    assert (summary.rows, summary.skipped, summary.redone) == (300, 0, 0)
    manifest = load_bundle(tiny_bundle_dir)
    names = [shard_name(number) for number in range(3)]
    assert summary.shards == names
    for name in names:
        ray_shard = read_shard(out / name, manifest)
        local_shard = read_shard(local_out / name, manifest)
        assert ray_shard.header == local_shard.header
        assert ray_shard.header.bundle_hash == manifest.content_hash
        assert (ray_shard.ids, ray_shard.texts, ray_shard.metadata) == (
            local_shard.ids,
            local_shard.texts,
            local_shard.metadata,
        )
        assert ray_shard.vectors.tobytes() == local_shard.vectors.tobytes()
    # Byte for byte: every shard file and embed.json.
    assert _files(out) == _files(local_out)
    assert json.loads((out / RUN_FILE).read_text("utf-8"))["rows"] == 300
    # One copy of the bundle on the (one) node, nothing half-written beside it.
    assert sorted(path.name for path in (node / NODE_CACHE).iterdir()) == sorted(
        [manifest.content_hash, f"{manifest.content_hash}.lock"]
    )
    copied = sorted(path.name for path in (node / NODE_CACHE / manifest.content_hash).iterdir())
    assert copied == sorted([ENCODER_FILE, TOKENIZER_FILE])


def test_a_rerun_on_ray_skips_finished_shards_and_redoes_missing_and_damaged_ones(
    ray_out: tuple[Path, Path, EmbedSummary],
    capsys: pytest.CaptureFixture[str],
    corpus: Path,
    tiny_bundle_dir: Path,
    local_out: Path,
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    shutil.copytree(ray_out[0], out)
    status, stdout, err = _embed_on_ray(capsys, corpus, tiny_bundle_dir, out)
    assert status == 0 and "(3 already done and skipped, 0 redone)" in stdout, err
    assert _files(out) == _files(local_out)

    (out / shard_name(1)).unlink()
    damaged = out / shard_name(2)
    damaged.write_bytes(damaged.read_bytes()[:100])
    status, stdout, err = _embed_on_ray(capsys, corpus, tiny_bundle_dir, out)
    assert status == 0, err
    assert "embedded 300 documents into 3 shards" in stdout
    assert "(1 already done and skipped, 1 redone)" in stdout
    assert f"redoing {shard_name(2)}" in err
    assert _files(out) == _files(local_out)


def test_the_cli_starts_a_local_cluster_and_stays_quiet(
    corpus: Path, tiny_bundle_dir: Path, local_out: Path, tmp_path: Path
) -> None:
    """``--ray`` with no address in a fresh process: its own 2-CPU cluster, shut at the end; no
    Ray line on stderr. The corpus's first 100 documents: the local path's first shard."""
    pytest.importorskip("ray.data")
    first = tmp_path / "first.jsonl"
    first.write_text("".join(corpus.read_text("utf-8").splitlines(True)[:SHARD_ROWS]), "utf-8")
    out = tmp_path / "out"
    result = _cli(
        "embed", first, "--bundle", tiny_bundle_dir, "--out", out, "--dtype", "float32",
        "--shard-size", SHARD_ROWS, "--workers", CPUS, "--no-progress", "--ray",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # Nothing from Ray's Python loggers, Ray Data's console or progress bars. Ray's C++ core
    # writes a line of its own only when something is slow (a GCS that takes over 5 s to
    # answer on a loaded machine): those are left out.
    core_line = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+ [DIWE] \d+ \d+\] ")
    assert [line for line in result.stderr.splitlines() if not core_line.match(line)] == []
    assert "embedded 100 documents into 1 shards" in result.stdout
    name = shard_name(0)
    assert (out / name).read_bytes() == (local_out / name).read_bytes()


def _cli(*argv: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m training.cli ARGV`` in a fresh process, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "training.cli", *map(str, argv)],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_without_ray_the_cli_names_the_extra(
    corpus: Path, tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    """An environment where ``import ray`` fails: one ``error:`` line, exit status 2."""
    shadow = tmp_path / "no-ray"
    shadow.mkdir()
    (shadow / "ray.py").write_text('raise ImportError("no ray here")\n', encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shadow), str(REPOSITORY)]))
    out = tmp_path / "out"
    result = _cli("embed", corpus, "--bundle", tiny_bundle_dir, "--out", out, "--ray", env=env)
    assert_one_error(result.returncode, result.stderr, "pip install 'fractal[scale]'")
    assert not out.exists()


def test_an_unreachable_cluster_is_one_error_line(
    corpus: Path, tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("ray.data")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once it is closed
    out = tmp_path / "out"
    result = _cli(
        "embed", corpus, "--bundle", tiny_bundle_dir, "--out", out, "--no-progress",
        "--ray", address,
    )  # fmt: skip
    assert_one_error(result.returncode, result.stderr, f"--ray {address}", "no Ray cluster")
    assert not list(out.glob("*.parquet"))


def test_the_bundle_is_copied_once_per_node(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    """Actors starting together on one node: one fetch, one copy; later ones fetch nothing."""
    pytest.importorskip("ray.data")
    from bulk.ray_embed import SHIPPED_FILES, node_copy

    manifest = load_bundle(tiny_bundle_dir)
    fetches: list[int] = []
    lock = threading.Lock()

    def fetch() -> dict[str, bytes]:
        with lock:
            fetches.append(1)
        time.sleep(0.2)  # the others reach the lock meanwhile
        return {name: (tiny_bundle_dir / name).read_bytes() for name in SHIPPED_FILES}

    with ThreadPoolExecutor(4) as pool:
        folders = set(pool.map(lambda _: node_copy(manifest, fetch, tmp_path), range(4)))
    assert folders == {tmp_path / manifest.content_hash} and len(fetches) == 1
    assert node_copy(manifest, fetch, tmp_path) == tmp_path / manifest.content_hash
    assert len(fetches) == 1
    for name in SHIPPED_FILES:
        assert (tmp_path / manifest.content_hash / name).read_bytes() == (
            tiny_bundle_dir / name
        ).read_bytes()

    # Bytes that do not match the manifest are refused, and nothing is left of them.
    other = tmp_path / "other"
    with pytest.raises(BulkError, match="does not match the bundle's sha256"):
        node_copy(manifest, lambda: {ENCODER_FILE: b"not the graph"}, other)
    assert [path.name for path in other.iterdir()] == [f"{manifest.content_hash}.lock"]
    shutil.rmtree(other)
