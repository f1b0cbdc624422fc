"""``docker-compose.yml`` is valid for Debian's ``docker-compose`` (no Docker engine is needed
to check it), and every file it mounts or builds from is in the repository."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from support.processes import ROOT
from tests.servers import require_binary

COMPOSE_FILE = ROOT / "docker-compose.yml"
SERVICES = {"fractal", "redis", "prometheus", "grafana"}
MOUNTED_ELSEWHERE = {"/bundle"}
"""Mount targets whose source the operator supplies (the bundle)."""


def _config() -> dict:
    """The file as ``docker-compose config`` validates and resolves it (defaults filled in)."""
    command = [require_binary("docker-compose"), "-f", str(COMPOSE_FILE), "config"]
    resolved = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert resolved.returncode == 0, resolved.stderr
    return yaml.safe_load(resolved.stdout)


def _mount(volume: str | dict) -> tuple[str, str]:
    """(source, target) of a volume in the short (``src:dst:ro``) or the long syntax."""
    if isinstance(volume, dict):
        return volume["source"], volume["target"]
    source, target = volume.split(":")[:2]
    return source, target


def test_compose_file_is_valid_and_complete() -> None:
    config = _config()
    services = config["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        assert service["restart"] == "unless-stopped", name
        assert service["healthcheck"]["test"], name
    dockerfile = Path(services["fractal"]["build"]["context"]) / services["fractal"]["build"][
        "dockerfile"
    ]
    assert dockerfile.is_file()
    for service in services.values():
        for volume in service.get("volumes", []):
            source, target = _mount(volume)
            if source.startswith("/") and target not in MOUNTED_ELSEWHERE:
                assert Path(source).exists(), f"{source} (mounted at {target}) is missing"
    assert services["fractal"]["environment"]["FRACTAL_REDIS_URL"] == "redis://redis:6379/0"


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
