"""The bundle's encoder, outside the service: ``tokenizer.json`` + ``encoder.onnx`` → full
embeddings, and the batching rules it runs by.

- :mod:`encoding.encoder` runs the graph on ONNX Runtime or OpenVINO (:class:`OnnxEncoder`);
- :mod:`encoding.length_batches` groups texts into encoder batches by token count;
- :mod:`encoding.cores` counts the cores a process may use, for its default thread counts.

The service (its encoder queue) and ``fractal embed`` (its worker processes and Ray actors) run
the same code, so this package lives beside both, not inside ``service/``: importing it loads
neither FastAPI, Starlette nor Redis, and never torch or ``training``. It sits apart from
``bundle/`` because the bundle format is stdlib-only and read by processes that never encode
(``fractal import``, the trainer's checks); this package needs ONNX Runtime and ``tokenizers``.
"""

TokenIds = tuple[int, ...]
"""One text as the token ids the encoder reads, special tokens included."""
