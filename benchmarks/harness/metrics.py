"""The service's Prometheus metrics as a dict, read through ``GET /metrics``."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset], float]
"""Every exported sample's value, keyed by sample name and its labels."""


def metric_samples(client: httpx.Client) -> Samples:
    """Every sample ``/metrics`` exports now (a FastAPI ``TestClient`` works too)."""
    response = client.get("/metrics")
    if response.status_code != 200:
        raise RuntimeError(f"GET /metrics answered {response.status_code}: {response.text[:300]}")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def metric(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when the service has not exported it yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def metric_total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over every label set that includes ``labels``."""
    wanted = set(labels.items())
    return sum(
        value for (sample, keys), value in samples.items() if sample == name and wanted <= keys
    )
