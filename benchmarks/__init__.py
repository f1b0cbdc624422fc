"""Measured tables. Every benchmark runs through one harness, from the repository root:

    python -m benchmarks --list                          # every benchmark, one line each
    python -m benchmarks NAME [--smoke] [--out DIR] [--quiet] [NAME's options]
    python -m benchmarks NAME --help                     # NAME's options

A run writes ``NAME.json``, ``NAME.md`` and (where the benchmark draws one) ``NAME.png`` under
``--out`` (default ``benchmarks/results``); ``--smoke`` runs a small variant in seconds to a few
minutes and writes ``NAME_smoke.*``. Some benchmarks add a suffix of their own (``http_load
--tag int8`` → ``http_load_int8``, ``low_dim --dataset clinc150`` → ``low_dim_clinc150``). Every
JSON holds the machine section (CPU model and SIMD flags, cores, load average at the start and
the end, library versions), the command, a ``smoke`` flag and a ``targets`` list of
``{"target", "reached", "met"}``.

A benchmark is a module of this package named in :data:`BENCHMARKS` that defines

- ``Settings``: a frozen dataclass with every parameter of a run, and ``SMOKE``, the smoke run's;
  the fields made with :func:`benchmarks.harness.runner.option` are its command-line options
  (``documents: int = option(100_000, "corpus size")`` → ``--documents N``);
- ``run(settings, progress) -> dict``: measures and returns the results, ``targets`` included
  (``progress`` is a :class:`benchmarks.harness.runner.Progress`);
- ``markdown(report) -> str``, and optionally ``plot(report, path)``: render the report, i.e.
  the results with the harness's ``smoke``, ``command``, ``machine`` and ``seconds``;
- optionally ``results_name(settings)``: the file stem, when it is not the module's name.

What the benchmarks share (the harness, the machine section, Markdown pieces, search data and
timing, live-service load and CLINC-150 documents) lives in :mod:`benchmarks.harness`; no
benchmark imports another.
"""

BENCHMARKS = (
    "backends",
    "batching",
    "bulk_embed",
    "c2f_sfs_pq",
    "cache_load",
    "churn",
    "crasher",
    "embed_ray",
    "encoder_shapes",
    "encoder_throughput",
    "filters",
    "funnel_peers",
    "http_load",
    "index_latency",
    "low_dim",
    "mshc",
    "mshc_service",
    "overload",
    "reproduce_clinc",
    "request_path",
    "routes",
    "scale",
    "service_quality",
    "scale_service",
    "service_settings",
    "sfs_retrieval",
    "soak",
)
