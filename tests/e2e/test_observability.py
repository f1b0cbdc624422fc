"""A real Prometheus, configured from ``docker/prometheus/prometheus.yml``, scrapes a real
service process (with a real Redis cache); its HTTP API answers for Fractal metrics, and every
expression of the Grafana dashboard names metrics the service exports and returns data."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from benchmarks.harness.metrics import metric, metric_samples
from benchmarks.harness.processes import ROOT, ServiceProcess, wait_until
from tests.servers import PrometheusServer, start_redis, start_server

SCRAPE_CONFIG = ROOT / "docker" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "fractal.json"
COMPOSE_DISCOVERY = {"names": ["fractal"], "type": "A", "port": 8000}
"""What the compose file's job discovers: every address of the ``fractal`` service, port 8000."""
METRIC_NAME = re.compile(r"\bfractal_[a-z0-9_]+\b")
QUERIES = ["transfer money to my savings", "is it going to rain tomorrow", "reset my pin"]
SEARCHES = [{"granularity": "coarse"}, {"granularity": "fine"}, {"rerank": "c2f"}]


@dataclass
class Stack:
    service: ServiceProcess
    prometheus: PrometheusServer


def scrape_config_for(target: str) -> dict:
    """The compose stack's scrape config, its DNS discovery of the replicas replaced by
    ``target`` alone, scraping every second."""
    config = yaml.safe_load(SCRAPE_CONFIG.read_text(encoding="utf-8"))
    (job,) = config["scrape_configs"]
    (discovery,) = job.pop("dns_sd_configs")
    assert {key: discovery[key] for key in COMPOSE_DISCOVERY} == COMPOSE_DISCOVERY
    job["static_configs"] = [{"targets": [target]}]
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    return config


def _traffic(client: httpx.Client) -> None:
    """Every kind of work the dashboard shows: documents, embeddings (twice: cache hits),
    searches at both granularities and with C2F, and an error."""
    documents = [{"text": text} for text in QUERIES]
    assert client.post("/documents", json={"documents": documents}).status_code == 200
    for _ in range(2):
        assert client.post("/embed", json={"texts": QUERIES, "dims": 64}).status_code == 200
    for options in SEARCHES:
        assert client.get("/search", params={"q": QUERIES[0], **options}).status_code == 200
    assert client.post("/embed", json={"texts": []}).status_code == 422


@pytest.fixture(scope="module")
def stack(v5_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("observability")
    redis = start_redis(directory)
    service = start_server(
        v5_bundle_dir, directory / "index", directory / "service.log", redis_url=redis.url
    )
    config = directory / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config_for(service.base_url.removeprefix("http://"))))
    prometheus = PrometheusServer(directory, config=config)
    try:
        prometheus.start()
        with service.client() as client:
            _traffic(client)
        yield Stack(service, prometheus)
    finally:
        prometheus.stop()
        service.kill()
        redis.kill()


def test_prometheus_scrapes_the_service(stack: Stack) -> None:
    with stack.service.client() as client:
        expected = metric(metric_samples(client), "fractal_cache_lookups_total", result="hit")
    assert expected == len(QUERIES) + len(SEARCHES)  # the second /embed, every search

    def scraped() -> bool:
        result = stack.prometheus.query('fractal_cache_lookups_total{result="hit"}')
        return bool(result) and float(result[0]["value"][1]) == expected

    wait_until(scraped, "Prometheus to scrape the service's cache hits", timeout_s=30)
    (up,) = stack.prometheus.query('up{job="fractal"}')
    assert up["value"][1] == "1"
    documents = stack.prometheus.query("fractal_documents")
    assert [float(sample["value"][1]) for sample in documents] == [len(QUERIES)]


def _dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def test_dashboard_names_only_exported_metrics(stack: Stack) -> None:
    with stack.service.client() as client:
        exported = {name for name, _ in metric_samples(client)}
    expressions = _dashboard_expressions()
    assert len(expressions) >= 15
    for expression in expressions:
        names = set(METRIC_NAME.findall(expression))
        assert names, expression
        assert names <= exported, f"{expression}: {sorted(names - exported)} not exported"


def test_every_dashboard_expression_returns_data_in_prometheus(stack: Stack) -> None:
    pending = set(_dashboard_expressions())

    def all_answered() -> bool:
        pending.difference_update({e for e in list(pending) if stack.prometheus.query(e)})
        return not pending

    wait_until(all_answered, "data for every dashboard expression", timeout_s=60)
