"""Where a search runs: a small one on the event loop, the others in the search threads.

A search of one query without a filter, with k up to ``FRACTAL_INLINE_SEARCH_MAX_K``, costs
less than the hop to a search thread and back, so it runs on the event loop, unless a write
holds or awaits the collection's lock (then it would stall the loop while it waits).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from service.search import SearchOutcome, SearchPlan
from tests.service.helpers import add_documents, make_settings, serve

SEARCH_THREAD = "search"
"""The name prefix of the search threads (:func:`service.startup._search_executor`)."""


def test_small_searches_run_on_the_event_loop_and_the_others_in_search_threads(
    v5_bundle_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(v5_bundle_dir, tmp_path, inline_search_max_k=5)
    with serve(settings) as client:
        add_documents(client, ["check my balance", "book a flight", "play jazz", "reset pin"])
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        searcher = runtime.searcher
        run = searcher.run
        threads: list[str] = []

        def recorded(vectors: object, plan: SearchPlan) -> SearchOutcome:
            threads.append(threading.current_thread().name)
            return run(vectors, plan)

        monkeypatch.setattr(searcher, "run", recorded)
        where = json.dumps({"key": "position", "gte": 1})
        requests = [
            ("GET", {"params": {"q": "balance", "k": 5}}),  # inline
            ("POST", {"json": {"queries": ["balance", "jazz"], "k": 2}}),  # two queries
            ("GET", {"params": {"q": "balance", "k": 2, "filter": where}}),  # a filter
            ("GET", {"params": {"q": "balance", "k": 6}}),  # k above the limit
        ]
        for method, options in requests:
            assert client.request(method, "/search", **options).status_code == 200

        holding, release = threading.Event(), threading.Event()

        def writer() -> None:
            with runtime.collection._lock.write():  # noqa: SLF001 - a write in progress
                holding.set()
                release.wait()

        thread = threading.Thread(target=writer)
        thread.start()
        holding.wait()
        threading.Timer(0.3, release.set).start()
        answer = client.get("/search", params={"q": "balance", "k": 2})
        thread.join()

    assert answer.status_code == 200
    assert not threads[0].startswith(SEARCH_THREAD), threads
    assert all(name.startswith(SEARCH_THREAD) for name in threads[1:]), threads
    assert len(threads) == 5
