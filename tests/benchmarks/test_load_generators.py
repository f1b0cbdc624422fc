"""The load generators of the harness: hey's CSV read into latencies per status, and wrk and
hey against a tiny local HTTP server that records what it was sent (no timings asserted)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchmarks.harness.hey import parse_hey_csv, run_hey
from benchmarks.harness.wrk import HttpRequest, run_wrk
from tests.servers import require_binary

CSV = """response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset
0.0100,0.0009,0.0000,0.0002,0.0004,0.0003,200,0.0001
0.0300,0.0002,0.0000,0.0000,0.0012,0.0003,200,0.0005
0.0020,0.0000,0.0000,0.0000,0.0001,0.0001,429,0.0023
0.0200,0.0000,0.0000,0.0000,0.0002,0.0002,200,1.5000
"""


def test_hey_csv_gives_count_and_latency_per_status() -> None:
    rows = parse_hey_csv(CSV)
    assert len(rows) == 4 and rows.offset_s.max() == 1.5
    answered = rows.answered()
    assert list(answered) == ["200", "429"]
    assert answered["200"].count == 3 and answered["200"].p50_ms == pytest.approx(20.0)
    assert answered["200"].max_ms == pytest.approx(30.0)
    assert answered["429"].count == 1 and answered["429"].p99_ms == pytest.approx(2.0)
    assert len(parse_hey_csv(CSV.splitlines()[0])) == 0  # nothing answered


class _Recorder(BaseHTTPRequestHandler):
    """Answers 429 to every third request, 200 otherwise; records method, path and body."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        with self.lock:
            self.seen.append((self.command, self.path, body))
            status = 429 if len(self.seen) % 3 == 0 else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _answer


@pytest.fixture
def recorder() -> Iterator[str]:
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_wrk_sends_post_bodies_and_gets_in_turn_and_counts_statuses(recorder: str) -> None:
    require_binary("wrk")
    requests = [
        HttpRequest.post_json("/embed", {"texts": ['say "hi"\n']}),
        HttpRequest("GET", "/search?q=a+b&k=3"),
    ]
    result = run_wrk(recorder, requests, connections=2, seconds=1, count_statuses=True)
    seen = Counter(_Recorder.seen)
    assert set(seen) == {
        ("POST", "/embed", json.dumps({"texts": ['say "hi"\n']})),
        ("GET", "/search?q=a+b&k=3", ""),
    }
    assert result.statuses["200"] + result.statuses["429"] == result.requests > 0
    assert result.errors["status"] == result.statuses["429"]
    assert result.ok_qps < result.qps


def test_hey_counts_every_request_it_was_asked_for(recorder: str) -> None:
    require_binary("hey")
    request = HttpRequest.post_json("/embed", {"texts": ["a"]})
    result = run_hey(recorder, request, rate=40, seconds=0.5, workers=4)
    assert result.requests == 20 and result.transport_errors == 0
    assert result.count("2") + result.count("429") == 20
    assert {body for _, _, body in _Recorder.seen} == {request.body}


def test_hey_counts_requests_without_an_answer() -> None:
    require_binary("hey")
    result = run_hey("http://127.0.0.1:9", HttpRequest("GET", "/"), rate=4, seconds=1, workers=2)
    assert result.transport_errors == result.requests == 4 and result.answered == {}
