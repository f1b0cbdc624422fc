"""The container check: build Fractal's images and run the compose stack for real, then check it
from outside as a user would.

    python3 docker/check/check.py [--profile embedded|milvus|all] [--bundle DIR]

``embedded`` (the default profile) checks the image (its user, health check, HOME, commands), the
stack coming up healthy, embed and search, a Redis cache hit, Prometheus scraping the service, a
restart that keeps the documents (the ``fractal-data`` volume) and ``docker-compose down``
writing the index snapshot. ``milvus`` brings up three replicas on Milvus behind nginx and checks
that a write through one replica is read through the others, and that killing a replica under
load costs no 5xx at the balancer and no acknowledged write.

It runs on Docker when a Docker engine answers, else on Podman (root; ``docker/check/podman.sh``
prepares it). Images the compose file names are used when present, else pulled, else (no
registry) built from ``docker/check/standins``: each such image carries a ``fractal.stand-in``
label, and every line about it says STAND-IN. Standard library only; exit status 1 on the first
failed check, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PROJECT = "fractalcheck"
"""The compose project name: the check's containers and volumes never touch a user's stack."""
STANDINS = {
    "docker.io/library/debian:bookworm-slim": None,  # made by base-image.sh (debootstrap)
    "docker.io/library/redis:7.2-alpine": "redis",
    "docker.io/prom/prometheus:v2.53.2": "prometheus",
    "docker.io/grafana/grafana:11.2.0": "grafana",
    "docker.io/milvusdb/milvus:v3.0.1": "milvus",
    "quay.io/coreos/etcd:v3.5.25": "placeholder",
    "quay.io/minio/minio:RELEASE.2024-12-18T13-15-44Z": "placeholder",
}
"""Every image the Dockerfiles and the compose file take from a registry, and the stand-in
(``standins/Containerfile.NAME``) built under its name when no registry has it."""
BASE_IMAGE = "docker.io/library/debian:bookworm-slim"
PROFILE_IMAGES = {
    "embedded": [BASE_IMAGE, *list(STANDINS)[1:4]],
    "milvus": list(STANDINS),
}
READY_S = 240.0
HEALTH_INTERVAL_S = 3.0
REPLICAS = 3
SERVICE_USER = "10001"


class CheckFailed(Exception):
    """A check did not hold; the message says which and what was seen."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(
    *command: str,
    check: bool = True,
    timeout: float = 900,
    env: dict | None = None,
    capture: bool = True,
) -> subprocess.CompletedProcess:
    """Run a command; with ``check``, a non-zero exit is a :class:`CheckFailed` with its output."""
    done = subprocess.run(
        command,
        capture_output=capture,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if check and done.returncode != 0:
        tail = ((done.stdout or "") + (done.stderr or ""))[-3000:]
        raise CheckFailed(f"{' '.join(command)} exited {done.returncode}:\n{tail}")
    return done


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Engine:
    """The container engine (``docker`` or ``podman``) and the environment compose needs."""

    name: str
    env: dict[str, str] = field(default_factory=dict)

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 900
    ) -> subprocess.CompletedProcess:
        return run(self.name, *args, check=check, timeout=timeout, env=self.env)

    def exists(self, image: str) -> bool:
        return self("image", "inspect", image, check=False).returncode == 0

    def label(self, image: str) -> str | None:
        labels = json.loads(self("image", "inspect", image).stdout)[0]["Config"].get("Labels")
        return (labels or {}).get("fractal.stand-in")

    def run_healthchecks(self, stop: threading.Event) -> None:
        """Until ``stop``: run every container's health check every few seconds. Podman runs
        them from systemd timers, and there is no systemd here; compose's ``depends_on:
        condition: service_healthy`` waits on them."""
        while not stop.wait(HEALTH_INTERVAL_S):
            for container in self.containers():
                self("healthcheck", "run", container, check=False, timeout=30)

    def containers(self) -> list[str]:
        listed = self(
            "ps",
            "--filter",
            f"label=com.docker.compose.project={PROJECT}",
            "--format",
            "{{.Names}}",
        )
        return sorted(listed.stdout.split())

    def no_crash_loop(self) -> None:
        """Fails when a container of the stack has restarted: it crashed, and its restart
        policy hides that as a loop. The message ends with its last log lines."""
        for container in self.containers():
            state = json.loads(self("inspect", container).stdout)[0]
            if state.get("RestartCount"):
                tail = self("logs", "--tail", "5", container, check=False)
                raise CheckFailed(
                    f"{container} restarted {state['RestartCount']} time(s); its log ends:\n"
                    f"{tail.stdout}{tail.stderr}"
                )

    def statuses(self) -> dict[str, str]:
        listed = self(
            "ps",
            "--filter",
            f"label=com.docker.compose.project={PROJECT}",
            "--format",
            "{{.Names}}\t{{.Status}}",
        )
        return dict(line.split("\t", 1) for line in listed.stdout.splitlines() if "\t" in line)


def find_engine() -> Engine:
    """Docker when its engine answers, else Podman behind its Docker API socket."""
    if shutil.which("docker"):
        version = run("docker", "version", check=False, timeout=30)
        if version.returncode == 0 and "podman" not in version.stdout.lower():
            return Engine("docker")
    if not shutil.which("podman"):
        raise CheckFailed("neither a Docker engine nor podman: run docker/check/podman.sh")
    socket_path = Path(os.environ.get("FRACTAL_PODMAN_SOCKET", "/run/podman/podman.sock"))
    env = {"CONTAINERS_CONF": str(HERE / "containers.conf"), "DOCKER_HOST": f"unix://{socket_path}"}
    if not socket_path.exists():
        raise CheckFailed(f"no Podman API socket at {socket_path}: run docker/check/podman.sh")
    return Engine("podman", env)


def provide_images(engine: Engine, images: list[str]) -> dict[str, str]:
    """Each image: present, pulled, or built as its stand-in; what each one is, by name."""
    provenance = {}
    for image in images:
        if not engine.exists(image):
            pulled = (
                os.environ.get("FRACTAL_CHECK_PULL", "1") == "1"
                and engine("pull", "-q", image, check=False, timeout=180).returncode == 0
            )
            if not pulled:
                build_standin(engine, image)
        standin = engine.label(image)
        provenance[image] = f"STAND-IN: {standin}" if standin else "the real image"
        log(f"   {image}: {provenance[image]}")
    return provenance


def build_standin(engine: Engine, image: str) -> None:
    log(f"   {image}: no registry has it here; building its stand-in")
    if image == BASE_IMAGE:
        work = Path(os.environ.get("TMPDIR", "/tmp")) / "fractal-base-image"
        run("bash", str(HERE / "base-image.sh"), engine.name, str(work), env=engine.env)
        return
    context = HERE / "standins"
    engine(
        "build",
        "-q",
        "--format",
        "docker",
        "-f",
        str(context / f"Containerfile.{STANDINS[image]}"),
        "-t",
        image,
        str(context),
    )


@dataclass
class Stack:
    """One compose project: its command line, ports and HTTP helpers."""

    engine: Engine
    bundle: str
    profile: str
    port: int = field(default_factory=free_port)
    prometheus_port: int = field(default_factory=free_port)
    grafana_port: int = field(default_factory=free_port)

    @property
    def env(self) -> dict[str, str]:
        return {
            **self.engine.env,
            "FRACTAL_BUNDLE": self.bundle,
            "FRACTAL_PORT": str(self.port),
            "PROMETHEUS_PORT": str(self.prometheus_port),
            "GRAFANA_PORT": str(self.grafana_port),
            "COMPOSE_PROFILES": self.profile,
        }

    def compose(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return run(
            "docker-compose",
            "-p",
            PROJECT,
            "-f",
            str(ROOT / "docker-compose.yml"),
            *args,
            env=self.env,
            timeout=timeout,
        )

    def url(self, path: str, port: int | None = None) -> str:
        return f"http://127.0.0.1:{port or self.port}{path}"

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        port: int | None = None,
        timeout: float = 30,
    ) -> tuple[int, bytes]:
        return http(method, self.url(path, port), body, timeout)

    def json(self, method: str, path: str, body: object = None, port: int | None = None) -> dict:
        status, payload = self.request(method, path, body, port)
        if status != 200:
            raise CheckFailed(f"{method} {path}: {status} {payload[:300]!r}")
        return json.loads(payload)

    def wait(self, what: str, ok, timeout: float = READY_S) -> float:
        """Poll ``ok()`` until it holds; the seconds it took."""
        start = time.monotonic()
        while not ok():
            if time.monotonic() - start > timeout:
                raise CheckFailed(f"{what}: not within {timeout:.0f} s; {self.engine.statuses()}")
            self.engine.no_crash_loop()
            time.sleep(2)
        return time.monotonic() - start

    def all_healthy(self, count: int) -> bool:
        statuses = self.engine.statuses()
        return len(statuses) == count and all("(healthy)" in s for s in statuses.values())

    def ready(self, port: int | None = None) -> bool:
        try:
            return self.request("GET", "/ready", port=port, timeout=5)[0] == 200
        except OSError:
            return False


def http(method: str, url: str, body: object = None, timeout: float = 30) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def check_image(engine: Engine, image: str, bundle: str) -> None:
    """The image runs as its own user with HOME outside the data volume, keeps its health check,
    every console script of the package in it starts (or is absent), and both encoder runtimes
    (ONNX Runtime and OpenVINO's CPU plugin) run the bundle's encoder alike."""
    inspected = json.loads(engine("image", "inspect", image).stdout)[0]
    config = inspected["Config"]
    # Docker keeps the health check in Config, Podman beside it.
    if not (config.get("Healthcheck") or inspected.get("Healthcheck") or {}).get("Test"):
        raise CheckFailed(f"{image} has no HEALTHCHECK (an OCI build drops it: --format docker)")
    env = dict(item.split("=", 1) for item in config.get("Env") or [])
    if env.get("HOME", "").startswith("/data"):
        raise CheckFailed(f"{image}: HOME={env['HOME']} puts caches into the data volume")
    probe = engine("run", "--rm", "--entrypoint", "python", image, "-c", SCRIPTS_PROBE)
    report = json.loads(probe.stdout)
    if report["uid"] != int(SERVICE_USER):
        raise CheckFailed(f"{image} runs as uid {report['uid']}, not {SERVICE_USER}")
    if report["broken"]:
        raise CheckFailed(f"{image}: console scripts that cannot start: {report['broken']}")
    log(
        f"   {image}: uid {report['uid']}, HOME {env.get('HOME')}, health check kept, "
        f"commands {report['present']} start, {report['absent']} not installed"
    )
    mount = f"{Path(bundle).resolve()}:/bundle:ro"
    runtimes = engine(
        "run", "--rm", "-v", mount, "--entrypoint", "python", image, "-c", RUNTIMES_PROBE
    )
    difference = float(runtimes.stdout.strip().splitlines()[-1])
    if not difference < 1e-3:
        raise CheckFailed(f"{image}: OpenVINO and ONNX Runtime differ by {difference}")
    log(f"   {image}: OpenVINO CPU and ONNX Runtime embed alike (max |diff| {difference:.1e})")


SCRIPTS_PROBE = """
import importlib, importlib.metadata as md, json, os, shutil
present, absent, broken = [], [], []
for entry in md.distribution("fractal").entry_points.select(group="console_scripts"):
    if not shutil.which(entry.name):
        absent.append(entry.name)
        continue
    try:
        importlib.import_module(entry.module)
        present.append(entry.name)
    except ImportError as error:
        broken.append(f"{entry.name}: {error}")
print(json.dumps({"uid": os.getuid(), "present": present, "absent": absent, "broken": broken}))
"""
"""Run inside the image: every console script the package declares is absent or imports."""


RUNTIMES_PROBE = """
import numpy as np, onnxruntime
from bundle import ATTENTION_MASK, EMBEDDING, INPUT_IDS
from bundle.openvino_session import OpenVinoSession
ids = np.array([[101, 7592, 2088, 2000, 1996, 3945, 102]], dtype=np.int64)
feeds = {INPUT_IDS: ids, ATTENTION_MASK: np.ones_like(ids)}
runtime = onnxruntime.InferenceSession("/bundle/encoder.onnx", providers=["CPUExecutionProvider"])
expected = runtime.run([EMBEDDING], feeds)[0]
found = OpenVinoSession("/bundle/encoder.onnx", threads=1).run([EMBEDDING], feeds)[0]
print(float(np.abs(found - expected).max()))
"""
"""Run inside the image with the bundle mounted: one embedding on each encoder runtime."""


def image_size(engine: Engine, image: str) -> str:
    size = json.loads(engine("image", "inspect", image).stdout)[0]["Size"]
    return f"{size / 1e6:.0f} MB"


def check_embedded(stack: Stack) -> dict:
    engine = stack.engine
    timings = {}
    log("embedded: docker-compose up -d --build")
    start = time.monotonic()
    stack.compose("up", "-d", "--build")
    timings["up_s"] = round(time.monotonic() - start, 1)
    check_image(engine, "fractal:cpu", stack.bundle)
    timings["ready_s"] = round(stack.wait("/ready", stack.ready), 1)
    log(f"   ready {timings['ready_s']} s after up ({timings['up_s']} s)")

    embedded = stack.json("POST", "/embed", {"texts": ["transfer money"], "dims": [64]})
    if [len(prefix["vector"]) for prefix in embedded["data"][0]["embeddings"]] != [64]:
        raise CheckFailed(f"/embed: {embedded}")
    documents = [
        {"id": "a", "text": "move funds to my savings account"},
        {"id": "b", "text": "book a flight to Lisbon"},
        {"id": "c", "text": "what is the weather tomorrow"},
    ]
    stack.json("POST", "/documents", {"documents": documents})
    hits = stack.json("GET", "/search?q=send%20money%20to%20savings&k=1")["hits"]
    if [hit["id"] for hit in hits] != ["a"]:
        raise CheckFailed(f"/search: expected document a first, got {hits}")
    log("   embed and search: ok")

    stack.json("POST", "/embed", {"texts": ["transfer money"], "dims": [64]})
    hits_counted = metric(stack, 'fractal_cache_lookups_total{result="hit"}')
    if hits_counted < 1:
        raise CheckFailed("a repeated query was not a Redis cache hit")
    log(f"   Redis cache: {hits_counted:.0f} hit(s)")

    def scraped() -> bool:
        found = prometheus(stack, 'fractal_cache_lookups_total{result="hit"}')
        return bool(found) and float(found[0]["value"][1]) >= hits_counted

    stack.wait("Prometheus scraping the service", scraped, timeout=60)
    log("   Prometheus: scrapes the service (its cache-hit count came back through the query API)")
    grafana = http("GET", stack.url("/api/health", stack.grafana_port))
    log(f"   Grafana: /api/health {grafana[0]} {grafana[1][:120].decode(errors='replace')}")

    timings["healthy_s"] = round(
        stack.wait("every container healthy", lambda: stack.all_healthy(4)), 1
    )
    log(f"   healthy: {stack.engine.statuses()}")

    log("embedded: docker-compose down, then up: the documents stay (the fractal-data volume)")
    last = {"id": "d", "text": "reset my online banking password"}
    stack.json("POST", "/documents", {"documents": [last]})
    written = time.time()
    start = time.monotonic()
    stack.compose("down", timeout=300)
    timings["down_s"] = round(time.monotonic() - start, 1)
    snapshot = read_snapshot_manifest(engine)
    if snapshot["mtime"] < written - 1:
        raise CheckFailed(f"down wrote no snapshot after the last write: {snapshot}")
    log(
        f"   down in {timings['down_s']} s wrote the snapshot (store counter "
        f"{snapshot['counter']}, {len(snapshot['indexes'])} indexes)"
    )
    stack.compose("up", "-d")
    stack.wait("/ready after the restart", stack.ready)
    for document in [*documents, last]:
        stored = stack.json("GET", f"/documents/{document['id']}")
        if stored["text"] != document["text"]:
            raise CheckFailed(f"after the restart, {document['id']} is {stored}")
    recovery = stack.json("GET", "/info")["recovery"]
    if recovery["rebuilt"] or recovery["caught_up_changes"] or not recovery["loaded"]:
        raise CheckFailed(f"the restart did not open the indexes from the snapshot: {recovery}")
    log(
        f"   after the restart: all 4 documents; indexes {recovery['loaded']} opened from the "
        "snapshot, none rebuilt or caught up"
    )
    return timings


def metric(stack: Stack, sample: str) -> float:
    _, text = stack.request("GET", "/metrics")
    for line in text.decode().splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return 0.0


def prometheus(stack: Stack, query: str) -> list:
    status, body = stack.request(
        "GET", "/api/v1/query?query=" + urllib.request.quote(query), port=stack.prometheus_port
    )
    return json.loads(body)["data"]["result"] if status == 200 else []


def read_snapshot_manifest(engine: Engine) -> dict:
    """The embedded index's snapshot manifest in the stopped stack's volume, and its mtime."""
    read = engine(
        "run",
        "--rm",
        "-v",
        f"{PROJECT}_fractal-data:/data",
        "--entrypoint",
        "python",
        "fractal:cpu",
        "-c",
        "import json, os; p = '/data/index/snapshot/manifest.json'; "
        "m = json.load(open(p)); m['mtime'] = os.stat(p).st_mtime; print(json.dumps(m))",
    )
    return json.loads(read.stdout)


def in_replica(engine: Engine, replica: str, script: str) -> str:
    """Run a Python snippet inside a replica, against its own loopback."""
    return engine("exec", replica, "python", "-c", script, timeout=120).stdout


REPLICA_HTTP = """
import json, sys, urllib.request
def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request("http://127.0.0.1:8000" + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, None
"""


def check_milvus(stack: Stack, load_s: float) -> dict:
    engine = stack.engine
    timings = {}
    log(f"milvus: docker-compose --profile milvus up -d --build --scale fractal={REPLICAS}")
    start = time.monotonic()
    stack.compose("--profile", "milvus", "up", "-d", "--build", "--scale", f"fractal={REPLICAS}")
    timings["up_s"] = round(time.monotonic() - start, 1)
    check_image(engine, "fractal:cpu-milvus", stack.bundle)
    services = 3 + REPLICAS + 4  # redis, prometheus, grafana; replicas; nginx, milvus, etcd, minio
    timings["healthy_s"] = round(
        stack.wait("every container healthy", lambda: stack.all_healthy(services)), 1
    )
    stack.wait("/ready through nginx", stack.ready)
    replicas = [name for name in engine.containers() if re.search(r"_fractal_\d+$", name)]
    log(f"   up in {timings['up_s']} s, healthy after {timings['healthy_s']} s: {replicas}")

    def every_replica_scraped() -> bool:
        up = prometheus(stack, 'up{job="fractal"} == 1')
        return len(up) == REPLICAS

    stack.wait("Prometheus scraping every replica", every_replica_scraped, timeout=90)
    log(f"   Prometheus: {REPLICAS} replicas found by DNS and scraped")

    ids = [f"r{i}" for i in range(30)]
    writes = [{"id": i, "text": f"replica check document {i}"} for i in ids]
    out = in_replica(
        engine,
        replicas[0],
        REPLICA_HTTP
        + f"""
status, _ = call("POST", "/documents", {{"documents": {json.dumps(writes)}}})
print(status)""",
    )
    if out.strip() != "200":
        raise CheckFailed(f"write through {replicas[0]}: {out}")
    for other in replicas[1:]:
        out = in_replica(
            engine,
            other,
            REPLICA_HTTP
            + f"""
found = [call("GET", "/documents/" + i)[0] for i in {ids!r}]
print(sum(status == 200 for status in found))""",
        )
        if out.strip() != str(len(ids)):
            raise CheckFailed(
                f"{other} read {out.strip()} of {len(ids)} written through {replicas[0]}"
            )
    log(
        f"   {len(ids)} documents written through {replicas[0]} are read through "
        f"{', '.join(replicas[1:])}"
    )

    result = kill_under_load(stack, replicas[1], load_s)
    timings.update(result)
    return timings


def kill_under_load(stack: Stack, victim: str, load_s: float) -> dict:
    """``hey`` searches through nginx and a writer upserts one document per request while
    ``victim`` is killed (SIGKILL) a third of the way in: no 5xx, no acknowledged write lost."""
    hey = shutil.which("hey")
    if hey is None:
        raise CheckFailed("hey is not installed (apt-get install hey)")
    acknowledged, failures = [], []
    stop = threading.Event()

    def writer() -> None:
        number = 0
        while not stop.is_set():
            doc_id = f"k{number}"
            status, body = stack.request(
                "POST", "/documents", {"documents": [{"id": doc_id, "text": f"kill {number}"}]}
            )
            (acknowledged if status == 200 else failures).append((doc_id, status, body[:200]))
            number += 1

    load = subprocess.Popen(
        [hey, "-z", f"{load_s:.0f}s", "-c", "8", stack.url("/search?q=transfer%20money&k=5")],
        stdout=subprocess.PIPE,
        text=True,
    )
    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(load_s / 3)
    stack.engine("kill", victim)
    log(f"   killed {victim} (SIGKILL) {load_s / 3:.0f} s into {load_s:.0f} s of load")
    output, _ = load.communicate(timeout=load_s + 120)
    stop.set()
    thread.join(timeout=60)
    codes = {
        int(code): int(count)
        for code, count in re.findall(r"\[(\d{3})\]\s+(\d+) responses", output)
    }
    errors = (
        re.findall(r"\[\d+\]\s+(.+)", output.split("Error distribution:")[-1])
        if "Error distribution:" in output
        else []
    )
    server_errors = sum(count for code, count in codes.items() if code >= 500)
    log(
        f"   searches through nginx: {codes}, connection errors {len(errors)}; "
        f"writes acknowledged {len(acknowledged)}, failed {len(failures)}"
    )
    if server_errors or errors or failures:
        raise CheckFailed(f"5xx or errors at the balancer: {codes} {errors[:3]} {failures[:3]}")
    lookup = stack.json(
        "POST", "/documents/lookup", {"ids": [doc_id for doc_id, _, _ in acknowledged]}
    )
    found = set(lookup["found"])
    lost = [doc_id for doc_id, _, _ in acknowledged if doc_id not in found]
    if lost:
        raise CheckFailed(f"{len(lost)} acknowledged writes lost: {lost[:10]}")
    log(f"   all {len(acknowledged)} acknowledged writes found after the kill")
    return {
        "searches": sum(codes.values()),
        "search_5xx": server_errors,
        "writes_acknowledged": len(acknowledged),
        "writes_lost": len(lost),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=["embedded", "milvus", "all"], default="all")
    parser.add_argument(
        "--bundle",
        default="./runs/container-check/bundle",
        help="the bundle to serve, as FRACTAL_BUNDLE takes it (default: "
        "%(default)s, made with `fractal export-identity` when missing)",
    )
    parser.add_argument(
        "--load-s", type=float, default=30.0, help="seconds of load in the replica kill test"
    )
    parser.add_argument("--keep", action="store_true", help="leave the last stack running")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    started = time.monotonic()
    report: dict = {"engine": None, "images": {}, "sizes": {}, "profiles": {}}
    stop = threading.Event()
    try:
        engine = find_engine()
        report["engine"] = engine.name
        log(f"engine: {engine.name}")
        if engine.name == "podman":
            threading.Thread(target=engine.run_healthchecks, args=(stop,), daemon=True).start()
        if not Path(args.bundle).is_dir():
            log(f"bundle: making {args.bundle} (fractal export-identity)")
            run("fractal", "export-identity", "--out", args.bundle, capture=False)
        profiles = ["embedded", "milvus"] if args.profile == "all" else [args.profile]
        for profile in profiles:
            log(f"{profile}: images")
            report["images"].update(provide_images(engine, PROFILE_IMAGES[profile]))
            stack = Stack(engine, args.bundle, profile)
            try:
                if profile == "embedded":
                    report["profiles"][profile] = check_embedded(stack)
                    report["sizes"]["fractal:cpu"] = image_size(engine, "fractal:cpu")
                else:
                    report["profiles"][profile] = check_milvus(stack, args.load_s)
                    report["sizes"]["fractal:cpu-milvus"] = image_size(engine, "fractal:cpu-milvus")
            finally:
                if not args.keep:
                    stack.compose(
                        "--profile", profile, "down", "-v", "--remove-orphans", timeout=300
                    )
    except CheckFailed as failure:
        log(f"FAILED: {failure}")
        return 1
    finally:
        stop.set()
    report["seconds"] = round(time.monotonic() - started, 1)
    log(f"container check passed in {report['seconds']} s: {json.dumps(report)}")
    log(
        "proved: the project's images build and run, the compose wiring, health checks, volumes,"
        " the balancer; not proved where a line above says STAND-IN: the upstream images"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
