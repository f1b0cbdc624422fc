"""Processes and clients shared by the tests, the benchmarks and the CLI.

- :mod:`support.processes`: a free loopback port, the service as a real ``python -m service``
  process (started and waited for until ``/ready``), and a ``redis-server`` launcher.
- :mod:`support.client`: :class:`~support.client.FractalClient`, a small HTTP client of the
  service (batched ingest with retry on 429, search).
- :mod:`support.metrics`: the service's Prometheus metrics as a dict.

Nothing here imports torch or the service's code: it talks to the service over HTTP only.
"""
