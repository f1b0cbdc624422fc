"""Bulk embedding and bulk import: a user's corpus → Parquet shards of full vectors → a collection.

- :mod:`bulk.corpus` reads a corpus (JSONL, CSV/TSV with a header, Parquet, plain lines);
- :mod:`bulk.shards` is the shard format: writing atomically, reading and validating whole;
- :mod:`bulk.embed` runs the bundle's ONNX encoder over a corpus in worker processes
  (``fractal embed``), or :mod:`bulk.ray_embed` in Ray Data actors on a cluster
  (``fractal embed --ray``, the ``scale`` extra);
- :mod:`bulk.importer` adds shards to the service's collection without re-encoding
  (``fractal import``);
- :mod:`bulk.ingest` sends a corpus to a running service over HTTP, reporting the rows it
  rejects (``fractal ingest FILE``);
- :mod:`bulk.cli` holds those ``fractal`` commands' options and handlers.

Never imports torch, FastAPI or ``training``. Every problem with the user's input is one
:class:`BulkError` line naming the file and, where it applies, the row.
"""

from bulk.errors import BulkError

__all__ = ["BulkError"]
