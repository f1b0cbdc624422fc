"""Small encoder calls padded to a few shapes, for a runtime that pays for every new input shape.

OpenVINO's CPU plugin prepares every node of the graph again when an input's shape differs
from the last call's, and on short texts that costs more than the work itself. Measured on the
int8 twin (OpenVINO, one thread, 2-core Intel Xeon, CLINC-150 test utterances), CPU per text:

- one text a call: 7.3 ms with each call at its own length, 2.3 ms with the length rounded up
  to a multiple of 16;
- 1–8 texts a call: 3.2 ms exact, 2.2 ms with the length rounded, 1.7 ms with the rows rounded
  up to a power of two as well (the length to a multiple of 8 in that run);
- 1–32 texts a call: rounding the rows to a power of two as well cost more than it saved (2.4
  against 2.1 ms a text on one thread, 3.0 against 2.7 on two), so rows beyond
  :data:`ROW_STEP` stay as they are.

ONNX Runtime has no such cost, so there padding is only more work (its fp32 graph ran 25–45%
slower padded), and its calls keep their exact shape.

The shapes: the token length rounded up to a multiple of :data:`LENGTH_STEP`, never past the
backbone's limit; up to :data:`ROW_STEP` rows rounded up to a power of two. Padded tokens are
masked out and filler rows are dropped from the answer, so the vectors do not change (bit for
bit on the int8 twin, measured). Only calls of at most :data:`SMALL_CALL_TOKENS` padded tokens
are padded: in a larger call the work dwarfs the preparation, and padding would only add to it.
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
