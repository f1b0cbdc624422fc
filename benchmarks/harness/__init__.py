"""What the benchmarks share; nothing here is a benchmark.

- :mod:`~benchmarks.harness.runner`: command line, progress lines, results files;
- :mod:`~benchmarks.harness.machine`: the machine section of every results file;
- :mod:`~benchmarks.harness.markdown`: tables, bullet lists, speed-ups in words;
- :mod:`~benchmarks.harness.search_data`, :mod:`~benchmarks.harness.search_measure`: vectors,
  timing and recall for the search benchmarks;
- :mod:`~benchmarks.harness.encoder_variants`: fused and int8 variants of a bundle's encoder;
- :mod:`~benchmarks.harness.live_load`: a corpus, the service serving it, its requests, the
  encoder's own rate, and the asyncio client's load cells;
- :mod:`~benchmarks.harness.wrk`: closed-loop load from ``wrk`` (GETs and JSON POSTs, statuses
  counted);
- :mod:`~benchmarks.harness.hey`: rate-limited load from ``hey``, latency per status;
- :mod:`~benchmarks.harness.process_memory`: a process's ``/proc`` memory, once or every second;
- :mod:`~benchmarks.harness.clinc_documents`: CLINC-150 utterances as service documents.
- :mod:`~benchmarks.harness.router_decisions`: how often ``granularity=auto`` picks the right
  resolution on a mixed coarse/fine workload, offline.
"""
