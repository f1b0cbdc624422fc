"""``python -m service.healthcheck`` (the Docker HEALTHCHECK) against a real service process
whose ``/health`` and ``/ready`` need a key: healthy with the service's own settings, unhealthy
otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness.processes import ROOT, ServiceProcess

KEY = "healthcheck-key-0123456789"


def _healthcheck(
    server: ServiceProcess, bundle_dir: Path, api_keys: str, *options: str
) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FRACTAL_")}
    env.update(
        FRACTAL_BUNDLE_DIR=str(bundle_dir),
        FRACTAL_PORT=server.base_url.rsplit(":", 1)[1],
        FRACTAL_API_KEYS=api_keys,
        FRACTAL_PUBLIC_HEALTH="false",
    )
    command = [sys.executable, "-m", "service.healthcheck", *options]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_healthcheck_follows_the_service(
    launch: Callable[..., ServiceProcess], identity_bundle_dir: Path, tmp_path: Path
) -> None:
    server = launch(identity_bundle_dir, tmp_path / "index", api_keys=KEY, public_health="false")
    healthy = _healthcheck(server, identity_bundle_dir, KEY)
    assert healthy.returncode == 0, healthy.stderr
    wrong_key = _healthcheck(server, identity_bundle_dir, "not-the-service-key-000")
    assert wrong_key.returncode == 1
    assert "401" in wrong_key.stderr
    ready = _healthcheck(server, identity_bundle_dir, KEY, "--ready")
    assert ready.returncode == 0, ready.stderr
    refused = _healthcheck(server, identity_bundle_dir, "not-the-service-key-000", "--ready")
    assert refused.returncode == 1
    assert "/ready answered 401" in refused.stderr
    server.stop()
    stopped = _healthcheck(server, identity_bundle_dir, KEY)
    assert stopped.returncode == 1
    assert "unhealthy" in stopped.stderr
