"""The encoder's threads run nicer than the rest of the process (Linux keeps a nice value per
thread): set where a thread starts, inherited by the threads it starts, read back from /proc."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from bundle import load_bundle
from encoding.encoder import OnnxEncoder
from encoding.priority import MAX_NICE, lower_thread_priority, made_at_lower_priority
from tests.service.helpers import make_settings, serve

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="nice values per thread are Linux's"
)


def nice_of(native_id: int) -> int:
    """A thread's nice value as the kernel reports it (field 19 of its stat line)."""
    stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def tasks() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/task")}


def in_thread(work: Callable[[], int]) -> int:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(work()))
    thread.start()
    thread.join()
    return result[0]


def test_a_lowered_thread_is_nicer_and_the_rest_is_not() -> None:
    base = nice_of(threading.get_native_id())

    def lowered() -> int:
        lower_thread_priority(3)
        return nice_of(threading.get_native_id())

    assert in_thread(lowered) == min(MAX_NICE, base + 3)
    assert nice_of(threading.get_native_id()) == base

    def capped() -> int:
        lower_thread_priority(40)
        return nice_of(threading.get_native_id())

    assert in_thread(capped) == MAX_NICE

    def unchanged() -> int:
        lower_thread_priority(0)
        return nice_of(threading.get_native_id())

    assert in_thread(unchanged) == base


def test_threads_started_by_a_lowered_maker_inherit_its_value() -> None:
    base = nice_of(threading.get_native_id())
    seen: list[int] = []

    def make() -> str:
        child = threading.Thread(target=lambda: seen.append(nice_of(threading.get_native_id())))
        child.start()
        child.join()
        return "made"

    assert made_at_lower_priority(make, 2) == "made"
    assert seen == [min(MAX_NICE, base + 2)]
    assert nice_of(threading.get_native_id()) == base
    assert made_at_lower_priority(threading.get_native_id, 0) == threading.get_native_id()

    def fail() -> None:
        raise ValueError("no graph")

    with pytest.raises(ValueError, match="no graph"):
        made_at_lower_priority(fail, 2)


def test_onnx_runtime_pool_threads_run_lowered_and_encode_the_same(tiny_bundle_dir: Path) -> None:
    manifest = load_bundle(tiny_bundle_dir)
    base = nice_of(threading.get_native_id())
    before = tasks()
    lowered = OnnxEncoder(tiny_bundle_dir, manifest, threads=2, nice=4)
    # Other tests' background threads may come and go meanwhile; ONNX Runtime's are the ones
    # started lowered (the thread that built the session has ended).
    started = [task for task in tasks() - before if Path(f"/proc/self/task/{task}").exists()]
    assert any(nice_of(task) == min(MAX_NICE, base + 4) for task in started), (
        "no thread of ONNX Runtime's pool runs lowered"
    )
    assert lowered.nice == 4
    plain = OnnxEncoder(tiny_bundle_dir, manifest, threads=2)
    texts = ["play some jazz", "what is my balance"]
    assert (lowered.encode(texts).vectors == plain.encode(texts).vectors).all()


def test_the_service_encodes_in_a_lowered_thread_and_says_so(
    tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    settings = make_settings(tiny_bundle_dir, tmp_path / "index", encoder_nice=5)
    base = nice_of(threading.get_native_id())
    with serve(settings) as client:
        assert client.get("/info").json()["encoder"]["nice"] == 5
        assert client.post("/embed", json={"texts": ["play some jazz"]}).status_code == 200
        encoders = [t for t in threading.enumerate() if t.name.startswith("encoder_")]
        lowered = {nice_of(thread.native_id or 0) for thread in encoders}
        assert encoders and lowered == {min(MAX_NICE, base + 5)}
    with serve(make_settings(tiny_bundle_dir, tmp_path / "plain")) as client:
        assert client.get("/info").json()["encoder"]["nice"] == 0
