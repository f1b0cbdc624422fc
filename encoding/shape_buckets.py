"""Small encoder calls padded to a few shapes, for a runtime that pays for every new input shape.

OpenVINO's CPU plugin prepares the graph for each input shape it meets: a call at a new shape
costs most, one at a shape met before less, and alternating shapes more than repeating one. An
encoder that pads each call to its own longest text meets new shapes all the time. Measured on
the int8 twin (2-core Intel Xeon, CLINC-150 test utterances; ``docs/benchmarks.md``, "The
encoder's call shapes"):

- through the service from a fresh start (``http_load``), these shapes against exact ones:
  one-text ``/v1/embeddings`` 2.15–2.49× the requests a second at one connection and 1.27–1.37×
  at 32; more requests in 17 and 18 of 20 cells over two runs, a lower p99 in 20 and 19;
- in process, every shape met before it is timed (``benchmarks/encoder_shapes.py``): a one-text
  call 0.68–0.74× the CPU, but calls of several texts 1.13–1.25×, where the padding is more
  work than the shape changes it saves. The service runs decide the default;
  ``FRACTAL_ENCODER_SHAPE_BUCKETS=false`` turns it off;
- rounding rows beyond :data:`ROW_STEP` as well lost at 64 connections in 4 of 5 workloads.

ONNX Runtime has no such cost, so there padding is only more work (1.23–1.55× the CPU), and
its calls keep their exact shape.

The shapes: the token length rounded up to a multiple of :data:`LENGTH_STEP`, never past the
backbone's limit; up to :data:`ROW_STEP` rows rounded up to a power of two. Padded tokens are
masked out and filler rows are dropped from the answer, so the vectors do not change (bit for
bit on the int8 twin). Only calls of at most :data:`SMALL_CALL_TOKENS` padded tokens are
padded: in a larger call the work dwarfs the preparation.
"""

from __future__ import annotations

LENGTH_STEP = 16
"""Token lengths are padded to a multiple of this."""
ROW_STEP = 8
"""Calls of up to this many rows have them padded to a power of two; larger ones keep theirs."""
SMALL_CALL_TOKENS = 512
"""Calls of more padded tokens (rows × longest) than this keep their exact shape."""


def bucketed_shape(rows: int, longest: int, max_tokens: int) -> tuple[int, int]:
    """``(rows, length)`` of the call that encodes ``rows`` sequences whose longest has
    ``longest`` tokens, for a backbone that reads ``max_tokens``: both rounded up as the module
    docstring says, the length not past ``max(longest, max_tokens)``; a call of more than
    :data:`SMALL_CALL_TOKENS` padded tokens as it is."""
    if rows < 1 or longest < 1:
        raise ValueError(f"a call needs at least one row and one token, got {rows} × {longest}")
    if rows * longest > SMALL_CALL_TOKENS:
        return rows, longest
    length = min(-(-longest // LENGTH_STEP) * LENGTH_STEP, max(longest, max_tokens))
    return (1 << (rows - 1).bit_length() if rows <= ROW_STEP else rows), length
