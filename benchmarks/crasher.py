"""Crasher: the real service killed with ``kill -9`` at random moments under a mixed write load,
and checked after every restart against what its clients saw acknowledged.

    python -m benchmarks crasher --bundle runs/clinc150/bundle-int8      # 300 kills
    python -m benchmarks crasher --variants milvus --rounds 30           # the Milvus backend
    python -m benchmarks crasher --smoke --bundle B --out DIR            # 10 kills

The run is shared among storage **variants**, each served from its own index folder
(:data:`VARIANTS`): HNSW over float32 vectors with float32 full vectors and PQ, HNSW over SQ8 or
SQ4 codes with float16 full vectors, and the Milvus backend (a ``milvus-lite`` server). Before its
first round each embedded variant's default collection gets ``seed_documents`` documents of random
vectors (``POST /documents/vectors``), enough for the SQ and PQ indexes to train their codes.

Each **round** starts the service on a variant's folder and ends with one kill, its **phase**
drawn from :data:`PHASES`:

- ``load``: ``clients`` clients write at random (:mod:`benchmarks.harness.crash_clients`: upserts
  of new and replacing documents, vector imports, deletes, collection creates and deletes,
  filtered searches) for up to ``load_seconds``; then ``kill -9``. Periodic snapshots every
  ``snapshot_interval_s`` are often in progress at that moment.
- ``snapshot``: the same load, then SIGTERM, which writes the index snapshot and the full vectors'
  file on the way out, and ``kill -9`` at a random moment of that shutdown.
- ``start``: ``kill -9`` at a random moment of the start: indexes loaded and caught up with the
  store's change log.
- ``rebuild`` (embedded): every collection's ``vectors.json`` removed first, so the start rebuilds
  the full vectors' file from the store, and ``kill -9`` at a random moment of it.

A round that reaches ``/ready`` first checks every invariant of
:mod:`benchmarks.harness.crash_checks` (its recovery time is from the start of the process to
``/ready``); after the last round each variant starts once more and is checked. Reported: kills
per variant and phase, invariant violations (each with its round), writes acknowledged and in
flight at the kills, answers by status, and recovery times (p50 / p99).

Writes ``crasher[_TAG][_smoke].{json,md,png}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np
from matplotlib.figure import Figure

from benchmarks.harness.crash_checks import Checker
from benchmarks.harness.crash_clients import CrashClient, Workload
from benchmarks.harness.crash_ledger import DEFAULT, Ledger, Stored, vector_hash
from benchmarks.harness.markdown import markdown_table, targets_table
from benchmarks.harness.processes import MilvusServer, ProcessFailed, ServiceProcess, start_service
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option
from index.integrity import collection_folders

VARIANTS: dict[str, dict[str, str]] = {
    "flat": {
        "index_kinds": "exact,hnsw,pq",
        "hnsw_storage": "flat",
        "full_vectors_dtype": "float32",
    },
    "sq8": {"index_kinds": "exact,hnsw", "hnsw_storage": "sq8", "full_vectors_dtype": "float16"},
    "sq4": {"index_kinds": "exact,hnsw", "hnsw_storage": "sq4", "full_vectors_dtype": "float16"},
    "tq4": {"index_kinds": "exact,hnsw", "hnsw_storage": "tq4", "full_vectors_dtype": "float16"},
    "milvus": {"index_kinds": "exact,hnsw", "index_backend": "milvus"},
}
"""Each variant's service settings (``FRACTAL_*``)."""
PHASES = {"load": 0.5, "snapshot": 0.2, "start": 0.15, "rebuild": 0.15}
"""How often each kind of kill is drawn (``rebuild`` only for the embedded backend)."""
READY_TIMEOUT_S = 180.0
SEED_BATCH = 128


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    bundle: Path = option(DEFAULT_BUNDLE, "the bundle served", parse=bundle_folder)
    rounds: int = option(300, "kills, shared among the variants")
    variants: tuple[str, ...] = option(("flat", "sq8", "sq4", "tq4"), "storage variants (VARIANTS)")
    clients: int = option(4, "concurrent writing clients")
    ids_per_client: int = 40
    max_batch: int = 6
    load_seconds: float = option(2.0, "the most seconds of load before a kill")
    seed_documents: int = option(
        10_000, "random-vector documents each embedded variant starts with"
    )
    snapshot_interval_s: float = 0.5
    probes: int = 6
    """Documents per collection searched by their text through every index kind, per check."""
    seed: int = 7
    work_dir: Path | None = option(None, "folder for index folders and logs (default: temporary)")
    target_kills: int = 300
    tag: str = option("", "added to the result file names")


SMOKE = Settings(
    rounds=10, variants=("flat", "sq8"), load_seconds=1.0, seed_documents=300, target_kills=10
)


def results_name(settings: Settings) -> str:
    return "crasher" + (f"_{settings.tag}" if settings.tag else "")


@dataclass
class Lane:
    """One variant's index folder, ledger and history."""

    variant: str
    index_dir: Path
    ledger: Ledger = field(default_factory=Ledger)
    last_recovery_s: float = 2.0
    last_phase: str = "none"
    rounds: int = 0


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


class Crasher:
    """Runs the rounds (see the module docstring)."""

    def __init__(self, settings: Settings, work: Path, progress: Progress) -> None:
        unknown = sorted(set(settings.variants) - set(VARIANTS))
        if unknown:
            raise ValueError(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
        self.settings, self.work, self.progress = settings, work, progress
        self.rng = np.random.default_rng(settings.seed)
        self.lanes = [Lane(v, work / v) for v in settings.variants]
        self.milvus: MilvusServer | None = None
        self.rounds: list[dict] = []
        self.violations: list[str] = []
        self.answers: Counter[str] = Counter()
        self.recoveries: list[float] = []

    # -- the service -------------------------------------------------------------------------

    def _service_settings(self, lane: Lane) -> dict[str, str]:
        settings = dict(VARIANTS[lane.variant])
        settings["snapshot_interval_s"] = str(self.settings.snapshot_interval_s)
        if settings.get("index_backend") == "milvus":
            if self.milvus is None:
                self.milvus = MilvusServer(self.work / "milvus-server")
                self.milvus.directory.mkdir(parents=True, exist_ok=True)
                self.milvus.start()
            settings["milvus_uri"] = self.milvus.uri
            settings["milvus_prefix"] = f"crash{self.settings.seed}"
        return settings

    def _launch(self, lane: Lane) -> ServiceProcess:
        lane.index_dir.mkdir(parents=True, exist_ok=True)
        return start_service(
            self.settings.bundle,
            lane.index_dir,
            self.work / f"{lane.variant}.log",
            ready_timeout_s=None,
            **self._service_settings(lane),
        )

    def _workload(self, service: ServiceProcess, lane: Lane) -> Workload:
        info = httpx.get(f"{service.base_url}/info", timeout=30).json()
        return Workload(
            base_url=service.base_url,
            dim=int(info["manifest"]["dim"]),
            bundle_hash=str(info["bundle_hash"]),
            kinds=tuple(VARIANTS[lane.variant]["index_kinds"].split(",")),
            ids_per_client=self.settings.ids_per_client,
            max_batch=self.settings.max_batch,
        )

    def _seed(self, workload: Workload, lane: Lane) -> None:
        """The variant's first documents: random unit vectors, enough to train SQ and PQ."""
        count = self.settings.seed_documents
        rng = np.random.default_rng(self.settings.seed)
        with httpx.Client(base_url=workload.base_url, timeout=120) as http:
            for start in range(0, count, SEED_BATCH):
                vectors = rng.standard_normal((min(SEED_BATCH, count - start), workload.dim))
                vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype("<f4")
                documents = [
                    {"id": f"seed-{start + i}", "text": f"seed {start + i}", "vector": v.tolist()}
                    for i, v in enumerate(vectors)
                ]
                body = {"bundle_hash": workload.bundle_hash, "documents": documents}
                http.post("/documents/vectors", json=body).raise_for_status()
                for i, vector in enumerate(vectors):
                    key = (DEFAULT, f"seed-{start + i}")
                    lane.ledger.documents[key] = Stored(
                        f"seed {start + i}", {}, vector_hash(vector)
                    )
        self.progress(f"{lane.variant}: seeded {count:,} documents")

    # -- a round -----------------------------------------------------------------------------

    def _phase(self, lane: Lane) -> str:
        phases = dict(PHASES)
        if VARIANTS[lane.variant].get("index_backend") == "milvus":
            phases.pop("rebuild")
        if lane.rounds == 0:
            return "load"  # nothing to recover yet
        names = list(phases)
        weights = np.array([phases[name] for name in names])
        return str(self.rng.choice(names, p=weights / weights.sum()))

    def _check(self, lane: Lane, service: ServiceProcess, record: dict) -> Workload:
        workload = self._workload(service, lane)
        embedded = VARIANTS[lane.variant].get("index_backend") != "milvus"
        checker = Checker(
            workload,
            lane.ledger,
            self.settings.clients,
            lane.index_dir if embedded else None,
            self.settings.probes,
            self.rng,
        )
        checked = checker.check()
        record.update(
            violations=len(checked.violations),
            in_flight=checked.unresolved,
            in_flight_applied=checked.applied,
            documents=checked.documents,
            comparisons=checked.checks,
        )
        self.violations += [
            f"round {record['round']} ({lane.variant}, after a {lane.last_phase} kill): {problem}"
            for problem in checked.violations
        ]
        return workload

    def _start_clients(self, workload: Workload, lane: Lane) -> list[CrashClient]:
        """The clients, writing until they are stopped or the service dies."""
        stop = threading.Event()
        clients = [
            CrashClient(n, workload, lane.ledger, int(self.rng.integers(1 << 31)), stop)
            for n in range(self.settings.clients)
        ]
        for client in clients:
            client.start()
        return clients

    def _stop_clients(self, clients: list[CrashClient]) -> dict[str, int]:
        """Their answers by status, once every one has stopped."""
        for client in clients:
            client.stop.set()
        answers: Counter[str] = Counter()
        for client in clients:
            client.join(60)
            answers.update(client.answers)
        self.answers.update(answers)
        return dict(answers)

    def round(self, number: int, lane: Lane) -> None:
        phase = self._phase(lane)
        record: dict = {"round": number, "variant": lane.variant, "phase": phase}
        if phase == "rebuild":
            for _, folder in collection_folders(lane.index_dir):
                (folder / "vectors.json").unlink(missing_ok=True)
        started = time.perf_counter()
        service = self._launch(lane)
        if phase in ("start", "rebuild"):
            delay = float(self.rng.uniform(0.0, lane.last_recovery_s))
            time.sleep(delay)
            record.update(kill_at_s=round(delay, 3), ready_at_kill=_ready(service))
            if service.process.poll() is not None:
                self.violations.append(
                    f"round {number} ({lane.variant}): the service exited with status "
                    f"{service.process.returncode} while starting"
                )
            service.kill()
        else:
            service.wait_ready(READY_TIMEOUT_S)
            recovery = time.perf_counter() - started
            record["recovery_s"] = round(recovery, 3)
            if lane.rounds:
                self.recoveries.append(recovery)
            lane.last_recovery_s = recovery
            workload = self._check(lane, service, record)
            embedded = "index_backend" not in VARIANTS[lane.variant]
            if lane.rounds == 0 and self.settings.seed_documents and embedded:
                self._seed(workload, lane)
            seconds = float(self.rng.uniform(0.2, self.settings.load_seconds))
            before = lane.ledger.acknowledged
            clients = self._start_clients(workload, lane)
            time.sleep(seconds)
            if phase == "snapshot":
                service.process.send_signal(signal.SIGTERM)
                delay = float(self.rng.uniform(0.0, 0.3))
                time.sleep(delay)
                record["kill_after_sigterm_s"] = round(delay, 3)
            record["snapshot_in_progress"] = _snapshot_in_progress(lane.index_dir)
            service.kill()
            record.update(
                load_s=round(seconds, 3),
                answers=self._stop_clients(clients),
                acknowledged=lane.ledger.acknowledged - before,
            )
        lane.last_phase = phase
        lane.rounds += 1
        self.rounds.append(record)

    def final_check(self, lane: Lane) -> None:
        service = self._launch(lane)
        started = time.perf_counter()
        service.wait_ready(READY_TIMEOUT_S)
        record: dict = {"round": len(self.rounds), "variant": lane.variant, "phase": "final"}
        record["recovery_s"] = round(time.perf_counter() - started, 3)
        self.recoveries.append(record["recovery_s"])
        self._check(lane, service, record)
        service.stop()
        self.rounds.append(record)

    def close(self) -> None:
        if self.milvus is not None:
            self.milvus.stop()


def _snapshot_in_progress(index_dir: Path) -> bool:
    """Whether some collection's snapshot folder holds files its manifest does not name: a
    snapshot being written (or one cut short, whose files the next one removes)."""
    for _, folder in collection_folders(index_dir):
        snapshot = folder / "snapshot"
        try:
            manifest = json.loads((snapshot / "manifest.json").read_text(encoding="utf-8"))
            named = {"manifest.json"} | {
                name for entry in manifest["indexes"].values() for name in entry["sha256"]
            }
            if any(path.name not in named for path in snapshot.iterdir()):
                return True
        except (OSError, ValueError, KeyError):
            continue
    return False


def _ready(service: ServiceProcess) -> bool:
    try:
        return httpx.get(f"{service.base_url}/ready", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


def run(settings: Settings, progress: Progress) -> dict:
    with tempfile.TemporaryDirectory(prefix="crasher-") as temporary:
        work = settings.work_dir or Path(temporary)
        if settings.work_dir is not None:
            shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        crasher = Crasher(settings, work, progress)
        try:
            for number in range(settings.rounds):
                lane = crasher.lanes[number % len(crasher.lanes)]
                crasher.round(number, lane)
                if number % 10 == 9 or number == settings.rounds - 1:
                    acked = sum(lane.ledger.acknowledged for lane in crasher.lanes)
                    progress(
                        f"{number + 1} kills, {len(crasher.violations)} violations, "
                        f"{acked:,} writes acknowledged"
                    )
            for lane in crasher.lanes:
                crasher.final_check(lane)
        except ProcessFailed as failure:  # the report says so, with what came before
            crasher.violations.append(f"the service did not start: {failure}")
        finally:
            crasher.close()
    return _report(settings, crasher)


def _report(settings: Settings, crasher: Crasher) -> dict:
    kills = [r for r in crasher.rounds if r["phase"] != "final"]
    by_phase = {
        variant: dict(Counter(r["phase"] for r in kills if r["variant"] == variant))
        for variant in settings.variants
    }
    # A 503 after SIGTERM is the service refusing new work while it shuts down, as documented.
    server_errors = sum(
        n
        for r in kills
        for status, n in r.get("answers", {}).items()
        if status.startswith("5") and not (status == "503" and r["phase"] == "snapshot")
    )
    violations = len(crasher.violations)
    recovery = {
        "p50_s": _percentile(crasher.recoveries, 50),
        "p99_s": _percentile(crasher.recoveries, 99),
        "max_s": _percentile(crasher.recoveries, 100),
        "count": len(crasher.recoveries),
    }
    least = settings.target_kills
    targets = [
        {"target": f"kills ≥ {least}", "reached": len(kills), "met": len(kills) >= least},
        {"target": "0 invariant violations", "reached": violations, "met": violations == 0},
        {
            "target": "0 answers with a 5xx (but 503 after SIGTERM)",
            "reached": server_errors,
            "met": server_errors == 0,
        },
    ]
    return {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()},
        "kills": len(kills),
        "kills_by_variant_and_phase": by_phase,
        "kills_during_a_snapshot_write": sum(bool(r.get("snapshot_in_progress")) for r in kills),
        "violations": crasher.violations[:200],
        "violation_count": violations,
        "acknowledged_writes": sum(lane.ledger.acknowledged for lane in crasher.lanes),
        "in_flight_at_kills": sum(r.get("in_flight", 0) for r in crasher.rounds),
        "in_flight_applied": sum(r.get("in_flight_applied", 0) for r in crasher.rounds),
        "comparisons": sum(r.get("comparisons", 0) for r in crasher.rounds),
        "answers": dict(sorted(crasher.answers.items())),
        "recovery": recovery,
        "rounds": crasher.rounds,
        "targets": targets,
    }


def markdown(report: dict) -> str:
    settings = report["settings"]
    phases = list(PHASES)
    rows = [
        [variant, *[counts.get(phase, 0) for phase in phases], sum(counts.values())]
        for variant, counts in report["kills_by_variant_and_phase"].items()
    ]
    recovery = report["recovery"]
    lines = [
        f"# Crasher{' (smoke)' if report['smoke'] else ''}",
        "",
        f"`{report['command']}`: {report['kills']} kills (`kill -9`) of the real service under "
        f"{settings['clients']} writing clients, each restart checked against what they saw "
        f"acknowledged. Bundle `{settings['bundle']}`; {settings['seed_documents']:,} seed "
        f"documents per embedded variant; {report['seconds']:.0f} s in all.",
        "",
        "## Targets",
        "",
        targets_table(report["targets"]),
        "",
        "## Kills by variant and phase",
        "",
        markdown_table(["variant", *phases, "all"], rows),
        "",
        f"- kills while index snapshot files were being written: "
        f"{report['kills_during_a_snapshot_write']}",
        f"- writes acknowledged: {report['acknowledged_writes']:,}; in flight at a kill: "
        f"{report['in_flight_at_kills']:,}, of which stored: {report['in_flight_applied']:,}",
        f"- comparisons made by the checks: {report['comparisons']:,}",
        f"- recovery (process start to `/ready` after a kill): p50 {recovery['p50_s']} s, "
        f"p99 {recovery['p99_s']} s, max {recovery['max_s']} s over {recovery['count']} starts",
        f"- answers by status: {report['answers']}",
        "",
        "## Violations",
        "",
    ]
    lines += [f"- {v}" for v in report["violations"]] or ["None."]
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    figure = Figure(figsize=(9, 4))
    axes = figure.subplots(1, 2)
    for variant in report["kills_by_variant_and_phase"]:
        rounds = [r for r in report["rounds"] if r["variant"] == variant and "recovery_s" in r]
        axes[0].plot(
            [r["round"] for r in rounds], [r["recovery_s"] for r in rounds], ".", label=variant
        )
        acked = [r for r in report["rounds"] if r["variant"] == variant and "acknowledged" in r]
        axes[1].plot(
            [r["round"] for r in acked], [r["acknowledged"] for r in acked], ".", label=variant
        )
    axes[0].set(xlabel="round", ylabel="seconds to /ready", title="recovery after a kill")
    axes[1].set(xlabel="round", ylabel="writes acknowledged", title="writes before the kill")
    for axis in axes:
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
