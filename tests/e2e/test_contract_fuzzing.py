"""The published contract holds: schemathesis against the real service, API keys off and on.

For each setting, ``python -m service`` serves the tiny bundle and the schemathesis CLI reads
the schema the service serves (``/openapi.json``: its limits, its bundle's dims and kinds, and
the bearer scheme only when keys are set), then runs every phase (examples, coverage, fuzzing,
and the stateful phase, which follows the links from ``POST /documents`` to reading and
deleting the documents) with every check, about :data:`EXAMPLES` cases per operation. With keys
on it sends the key, and its coverage and auth checks send requests without it. The run must
find no failure (a 5xx is one: ``not_a_server_error``); the HAR report of the requests it sent
must hold no 5xx; and the two runs together must send at least :data:`MIN_REQUESTS` requests.

The cases come from :data:`DEFAULT_SEED` unless ``FRACTAL_FUZZ_SEED`` says otherwise
(``random``: a new seed each run, printed with the results).

Only failures the schema cannot prevent are dropped, by ``schemathesis_hooks.py``: a
schema-valid request refused by a documented rule between fields (``dims`` with
``granularity``, C2F's options, an id repeated in one request).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.harness.processes import ServiceProcess

DEFAULT_SEED = "20261124"
"""The seed CI fuzzes with, so that a red run is a reproducible finding, not luck of the draw;
``FRACTAL_FUZZ_SEED=random`` (or another number) explores further."""

EXAMPLES = 100
"""Cases per operation and phase (``--max-examples``)."""
MIN_REQUESTS = 2000
"""Requests the two runs must send together."""
RUN_TIMEOUT_S = 300
# One worker: with two, hypothesis parses lambda sources in two threads at once, which CPython
# 3.11.7 can fail with "SystemError: AST constructor recursion depth mismatch" (a runtime error
# of the fuzzer, not a finding; seen once in CI with seed 20261124).
KEY = "contract-test-key-0123456789"
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
PHASES = "examples,coverage,fuzzing,stateful"


@dataclass(frozen=True)
class Run:
    """What one schemathesis run reported."""

    exit_code: int
    output: str
    report: dict
    statuses: Counter[int]

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    @property
    def server_errors(self) -> int:
        return sum(count for status, count in self.statuses.items() if status >= 500)

    def summary(self) -> str:
        cases = self.report["test_cases"]
        return (
            f"{self.requests} requests ({dict(sorted(self.statuses.items()))}), "
            f"{cases['generated']} cases, {len(self.report['failures'])} failures, "
            f"{self.report['filtered']} rejections by rules between fields, "
            f"{self.report['running_time']:.0f} s, seed {self.report['seed']}"
        )


def _schemathesis(base_url: str, report_dir: Path, headers: dict[str, str]) -> Run:
    """Run the schemathesis CLI against the service; its JSON and HAR reports, read back."""
    command = [
        sys.executable, "-m", "schemathesis.cli", "run", f"{base_url}/openapi.json",
        "--phases", PHASES, "--checks", "all", "--max-examples", str(EXAMPLES),
        "--workers", "1", "--generation-database", "none", "--no-color",
        "--report", "json,har", "--report-dir", str(report_dir),
    ]  # fmt: skip
    seed = os.environ.get("FRACTAL_FUZZ_SEED", DEFAULT_SEED)
    if seed != "random":
        command += ["--seed", seed]
    for name, value in headers.items():
        command += ["--header", f"{name}: {value}"]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)}
    finished = subprocess.run(
        command,
        cwd=report_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    output = finished.stdout + finished.stderr
    reports = {path.name.split("-")[0]: path for path in report_dir.glob("*.json")}
    assert {"json", "har"} <= set(reports), f"schemathesis wrote no reports:\n{output[-4000:]}"
    report = json.loads(reports["json"].read_text(encoding="utf-8"))
    har = json.loads(reports["har"].read_text(encoding="utf-8"))
    statuses = Counter(entry["response"]["status"] for entry in har["log"]["entries"])
    return Run(finished.returncode, output, report, statuses)


def _check(run: Run, what: str) -> None:
    details = f"{what}: {run.summary()}\n{run.output[-6000:]}"
    assert run.exit_code == 0 and not run.report["failures"], details
    assert run.report["errors"] == [], details
    assert run.server_errors == 0, details
    assert run.report["phases"]["stateful"]["status"] == "success", details
    assert run.report["operations"]["tested"] == run.report["operations"]["total"], details


@pytest.fixture
def fuzz(
    tiny_bundle_dir: Path, tmp_path: Path, launch: Callable[..., ServiceProcess]
) -> Callable[..., Run]:
    """``fuzz(name, **settings)``: a fresh service with ``settings``, fuzzed."""

    def run(name: str, **settings: str) -> Run:
        service = launch(tiny_bundle_dir, tmp_path / f"index-{name}", **settings)
        report_dir = tmp_path / f"schemathesis-{name}"
        report_dir.mkdir()
        key = settings.get("api_keys")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            return _schemathesis(service.base_url, report_dir, headers)
        finally:
            service.stop()

    return run


def test_schemathesis_finds_no_contract_failure_with_keys_off_and_on(
    fuzz: Callable[..., Run],
) -> None:
    open_run = fuzz("keys-off")
    _check(open_run, "keys off")
    locked_run = fuzz("keys-on", api_keys=KEY)
    _check(locked_run, "keys on")
    assert 401 in locked_run.statuses, "with keys on, no request went without the key"
    assert 401 not in open_run.statuses
    total = open_run.requests + locked_run.requests
    print(f"\nkeys off: {open_run.summary()}\nkeys on: {locked_run.summary()}")
    assert total >= MIN_REQUESTS, (open_run.summary(), locked_run.summary())
