"""``docker-compose.yml`` is valid for Debian's ``docker-compose`` (no Docker engine is needed
to check it) in both its deployments, and every file it mounts or builds from is in the
repository.

- default (the ``embedded`` profile, which ``.env`` selects): one service on the embedded index;
- ``--profile milvus``: stateless replicas of the service ``fractal`` (``--scale fractal=N``) on
  Milvus standalone, behind nginx, each scraped by Prometheus. nginx's upstream and Prometheus's
  discovery name that service and its port as the compose file defines them.

``docker-compose config`` resolves the file (variables, merges) but, in Compose v1, does not
drop the services of inactive profiles; :func:`_enabled` applies compose's rule."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from benchmarks.harness.processes import ROOT
from service.settings import Settings
from tests.servers import require_binary

COMPOSE_FILE = ROOT / "docker-compose.yml"
COMPOSE_ENV_FILE = ROOT / ".env"
NGINX_CONFIG = ROOT / "docker" / "nginx" / "nginx.conf"
SCRAPE_CONFIG = ROOT / "docker" / "prometheus" / "prometheus.yml"
MILVUS_USER_CONFIG = ROOT / "docker" / "milvus" / "user.yaml"

SCALED = "fractal"
"""The service ``docker-compose --profile milvus up --scale fractal=N`` names."""
SHARED = {"redis", "prometheus", "grafana"}
DEPLOYMENTS = {
    (): SHARED | {"fractal-embedded"},
    ("milvus",): SHARED | {SCALED, "nginx", "milvus", "etcd", "minio"},
}
"""The services each command line runs: no --profile (the .env default), --profile milvus."""
MOUNTED_ELSEWHERE = {"/bundle"}
"""Mount targets whose source the operator supplies (the bundle)."""
MILVUS_VECTOR_FIELDS = 10
"""Vector fields a Fractal collection may need: one per (scoring, prefix dim, index kind)."""
NGINX_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'|[{};]|[^\s{};"\']+')
"""A word of nginx.conf: double- or single-quoted, a brace or ``;``, or a bare word."""
NGINX_RESOLVER_FILE = "/etc/nginx/resolver.conf"
"""Written by docker/nginx/entrypoint.sh with the container's DNS server; nginx.conf includes it."""
DOCUMENTED_COMMANDS = ("README.md", "docs/*.md", "docker-compose.yml")
DOCUMENTED_COMPOSE = re.compile(
    r"FRACTAL_BUNDLE=(\S+) docker-compose(?: -p \S+)?(?: --profile (\S+))?"
)
"""A documented compose command line: the bundle path it sets and its profile, if any."""
PASSED_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL")
"""All compose sees of the caller's environment: no COMPOSE_PROFILES, no FRACTAL_PORT, so the
checks are of the repository's defaults."""


def _seconds(duration: str) -> float:
    """A compose duration (``120s``, ``2m0s``, ``1m30s``) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    return sum(
        float(number) * units[unit] for number, unit in re.findall(r"([\d.]+)([hms])", duration)
    )


def _config(*profiles: str, env: dict[str, str] | None = None) -> dict:
    """The file as ``docker-compose config`` validates and resolves it (defaults filled in),
    with the repository's ``.env`` and defaults (and ``env``), not the caller's variables."""
    command = [require_binary("docker-compose"), "-f", str(COMPOSE_FILE)]
    command += [option for profile in profiles for option in ("--profile", profile)]
    passed = {key: os.environ[key] for key in PASSED_ENVIRONMENT if key in os.environ}
    resolved = subprocess.run(
        [*command, "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**passed, **(env or {})},
    )
    assert resolved.returncode == 0, resolved.stderr
    return yaml.safe_load(resolved.stdout)


def _default_profiles() -> list[str]:
    """COMPOSE_PROFILES from ``.env``: the profiles a command line without --profile runs."""
    for line in COMPOSE_ENV_FILE.read_text(encoding="utf-8").splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "COMPOSE_PROFILES":
            return [profile.strip() for profile in value.split(",") if profile.strip()]
    return []


def _enabled(config: dict, profiles: tuple[str, ...]) -> dict[str, dict]:
    """The services compose runs: those without profiles and those of an active profile
    (``--profile`` flags, else ``.env``'s default)."""
    active = set(profiles) if profiles else set(_default_profiles())
    return {
        name: service
        for name, service in config["services"].items()
        if not service.get("profiles") or active & set(service["profiles"])
    }


def _mount(volume: str | dict) -> tuple[str, str]:
    """(source, target) of a volume in the short (``src:dst:ro``) or the long syntax."""
    if isinstance(volume, dict):
        return volume["source"], volume["target"]
    source, target = volume.split(":")[:2]
    return source, target


def _port(port: str | dict) -> tuple[int | None, int]:
    """(published, target) of a port in the long or the short (``[ip:]host:container``) syntax."""
    if isinstance(port, dict):
        published = port.get("published")
        return (int(published) if published is not None else None), int(port["target"])
    parts = str(port).split("/")[0].split(":")
    return (int(parts[-2]) if len(parts) > 1 else None), int(parts[-1])


def _deployment(profiles: tuple[str, ...]) -> dict[str, dict]:
    services = _enabled(_config(*profiles), profiles)
    assert set(services) == DEPLOYMENTS[profiles]
    return services


@pytest.mark.parametrize("profiles", list(DEPLOYMENTS), ids=["default", "milvus"])
def test_each_deployment_is_valid_and_complete(profiles: tuple[str, ...]) -> None:
    services = _deployment(profiles)
    for name, service in services.items():
        assert service["restart"] == "unless-stopped", name
        assert service["healthcheck"]["test"], name
        missing = set(service.get("depends_on", {})) - set(services)
        assert not missing, f"{name} depends on {missing}, which this deployment does not run"
        for volume in service.get("volumes", []):
            source, target = _mount(volume)
            if source.startswith("/") and target not in MOUNTED_ELSEWHERE:
                assert Path(source).exists(), f"{source} (mounted at {target}) is missing"
        if "build" in service:
            build = service["build"]
            assert (Path(build["context"]) / build.get("dockerfile", "Dockerfile")).is_file()
        if "FRACTAL_INDEX_BACKEND" in service.get("environment", {}):  # a Fractal service
            assert service["environment"]["FRACTAL_REDIS_URL"] == "redis://redis:6379/0"
            # SIGKILL only after the drain and the snapshot: more than the service's own grace.
            grace = float(service["environment"]["FRACTAL_SHUTDOWN_GRACE_S"])
            assert _seconds(service["stop_grace_period"]) >= grace + 60, name


def test_default_deployment_is_one_embedded_service() -> None:
    (name,) = DEPLOYMENTS[()] - SHARED
    service = _deployment(())[name]
    assert service["environment"]["FRACTAL_INDEX_BACKEND"] == "embedded"
    assert ("fractal-data", "/data") in [_mount(volume) for volume in service["volumes"]]
    assert [_port(port) for port in service["ports"]] == [(8000, 8000)]
    # Prometheus's discovery and the replicas share one name: the embedded service answers to it.
    assert SCALED in service["networks"]["default"]["aliases"]


def test_milvus_profile_runs_stateless_replicas() -> None:
    services = _deployment(("milvus",))
    replica = services[SCALED]
    environment = replica["environment"]
    assert environment["FRACTAL_INDEX_BACKEND"] == "milvus"
    milvus_uri = urlsplit(environment["FRACTAL_MILVUS_URI"])
    assert milvus_uri.hostname in services and milvus_uri.port == 19530
    assert replica["depends_on"][milvus_uri.hostname]["condition"] == "service_healthy"
    # Stateless and scalable: no volume under /data, no host port to collide on.
    targets = [_mount(volume)[1] for volume in replica.get("volumes", [])]
    assert not [target for target in targets if target == "/data" or target.startswith("/data/")]
    assert "ports" not in replica
    assert "--ready" in replica["healthcheck"]["test"]

    mounts = dict(_mount(volume) for volume in services[milvus_uri.hostname]["volumes"])
    assert mounts[str(MILVUS_USER_CONFIG)] == "/milvus/configs/user.yaml"
    user_config = yaml.safe_load(MILVUS_USER_CONFIG.read_text(encoding="utf-8"))
    assert user_config["proxy"]["maxVectorFieldNum"] == MILVUS_VECTOR_FIELDS


def test_images_are_pinned_to_a_version() -> None:
    services = {}
    for profiles in DEPLOYMENTS:
        services.update(_config(*profiles)["services"])
    for name, service in services.items():
        if "build" in service:
            continue
        repository, _, tag = service["image"].rpartition(":")
        assert repository and "/" not in tag, f"{name}: {service['image']} has no tag"
        assert "latest" not in tag.lower() and re.search(r"\d", tag), f"{name}: {tag}"


def _nginx_blocks(text: str) -> list[tuple[str, list[str], list]]:
    """nginx.conf as nested (directive, arguments, block) statements, as far as nginx's own
    grammar goes: quoted and bare words, ``;`` ends a statement, ``{ … }`` a block."""
    tokens = NGINX_TOKEN.findall(re.sub(r"#.*", "", text))
    stack: list[list] = [[]]
    words: list[str] = []
    for token in tokens:
        if token in ("{", ";"):
            assert words, f"a {token!r} without a directive"
            statement = (words[0], words[1:], [] if token == "{" else None)
            stack[-1].append(statement)
            if token == "{":
                stack.append(statement[2])
            words = []
        elif token == "}":
            assert not words and len(stack) > 1, "unbalanced '}' or a statement without ';'"
            stack.pop()
        else:
            words.append(token.strip("\"'"))
    assert not words and len(stack) == 1, "unclosed block or a statement without ';'"
    return stack[0]


def _find(block: list, directive: str) -> list[tuple[str, list[str], list]]:
    return [statement for statement in block if statement[0] == directive]


def _bytes(size: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    return int(size[:-1]) * units[size[-1].lower()] if size[-1].isalpha() else int(size)


def test_nginx_balances_every_replica_of_the_scaled_service() -> None:
    """nginx is built here on Debian's nginx, looks the scaled service's name up at request time
    through the DNS server its entry point names (Docker's or Podman's), and proxies to it."""
    services = _deployment(("milvus",))
    nginx, replica = services["nginx"], services[SCALED]
    build = Path(nginx["build"]["context"])
    assert build == NGINX_CONFIG.parent and "volumes" not in nginx
    dockerfile = (build / nginx["build"].get("dockerfile", "Dockerfile")).read_text()
    assert re.search(r"^FROM debian:\S+", dockerfile, re.MULTILINE), "Debian's nginx"
    assert "COPY nginx.conf /etc/nginx/nginx.conf" in dockerfile
    assert nginx["depends_on"][SCALED]["condition"] == "service_healthy"

    (http,) = _find(_nginx_blocks(NGINX_CONFIG.read_text(encoding="utf-8")), "http")
    assert not _find(http[2], "resolver") and not _find(http[2], "upstream")
    (include,) = _find(http[2], "include")
    assert include[1] == [NGINX_RESOLVER_FILE]
    assert NGINX_RESOLVER_FILE in (build / "entrypoint.sh").read_text()

    (site,) = _find(http[2], "server")
    (variable,) = _find(site[2], "set")
    host, _, port = variable[1][1].partition(":")
    assert host == SCALED and port in replica["expose"]
    (listen,) = _find(site[2], "listen")
    assert [_port(port) for port in nginx["ports"]] == [(8000, int(listen[1][0]))]
    (body_limit,) = _find(site[2], "client_max_body_size")
    assert _bytes(body_limit[1][0]) >= Settings.model_fields["max_body_bytes"].default
    (root,) = [location for location in _find(site[2], "location") if location[1] == ["/"]]
    assert _find(root[2], "proxy_pass")[0][1] == [f"http://{variable[1][0]}"]
    headers = {arguments[0].lower() for _, arguments, _ in _find(root[2], "proxy_set_header")}
    assert "x-request-id" in headers


def test_nginx_config_is_valid_for_debians_nginx(tmp_path: Path) -> None:
    """``nginx -t`` of Debian's nginx (the version the image installs) accepts the file, with
    the resolver line the entry point writes."""
    nginx = require_binary("nginx")
    resolver = tmp_path / "resolver.conf"
    resolver.write_text("resolver 127.0.0.11 valid=5s ipv6=off;\n")
    config = NGINX_CONFIG.read_text(encoding="utf-8")
    config = config.replace(NGINX_RESOLVER_FILE, str(resolver))
    config = config.replace("pid /run/nginx.pid;", f"pid {tmp_path / 'nginx.pid'};")
    (tmp_path / "nginx.conf").write_text(config)
    tested = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0, tested.stderr


def test_documented_compose_commands_resolve() -> None:
    """Every ``FRACTAL_BUNDLE=… docker-compose …`` command in the docs and the compose file's
    comments resolves, with the bundle bound from a path (not read as a volume name)."""
    commands = []
    for source in DOCUMENTED_COMMANDS:
        for path in sorted(ROOT.glob(source)):
            commands += DOCUMENTED_COMPOSE.findall(path.read_text(encoding="utf-8"))
    assert len(commands) >= 2, "the docs show the compose commands"
    for bundle, profile in set(commands):
        profiles = (profile,) if profile else ()
        services = _enabled(_config(*profiles, env={"FRACTAL_BUNDLE": bundle}), profiles)
        for name, service in services.items():
            for volume in service.get("volumes", []):
                source, target = _mount(volume)
                if target == "/bundle":
                    assert source == str(ROOT / bundle), (name, bundle, source)


def test_prometheus_discovers_every_replica() -> None:
    services = _deployment(("milvus",))
    mounts = dict(_mount(volume) for volume in services["prometheus"]["volumes"])
    assert mounts[str(SCRAPE_CONFIG)] == "/etc/prometheus/prometheus.yml"
    (job,) = yaml.safe_load(SCRAPE_CONFIG.read_text(encoding="utf-8"))["scrape_configs"]
    (discovery,) = job["dns_sd_configs"]
    assert discovery["names"] == [SCALED] and discovery["type"] == "A"
    assert str(discovery["port"]) in services[SCALED]["expose"]


def test_grafana_provisioning_matches_the_dashboard() -> None:
    """The dashboard's panels use the provisioned data source, and the dashboards provider
    reads the folder compose mounts the dashboard into."""
    grafana = ROOT / "docker" / "grafana"
    (source,) = yaml.safe_load(
        (grafana / "provisioning" / "datasources" / "prometheus.yml").read_text(encoding="utf-8")
    )["datasources"]
    (provider,) = yaml.safe_load(
        (grafana / "provisioning" / "dashboards" / "fractal.yml").read_text(encoding="utf-8")
    )["providers"]
    dashboard = json.loads((grafana / "dashboards" / "fractal.json").read_text(encoding="utf-8"))
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        assert all(target["datasource"]["uid"] == source["uid"] for target in panel["targets"])
    mounts = dict(_mount(volume) for volume in _config()["services"]["grafana"]["volumes"])
    assert mounts[str(grafana / "dashboards")] == provider["options"]["path"]
