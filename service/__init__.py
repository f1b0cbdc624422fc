"""The HTTP service: serves a bundle's embeddings and searches stored documents.

Layers, each talking to the next through small types: ``routes`` (HTTP and schemas, no maths)
→ ``runtime`` (the loaded service and its operations) → ``batching`` (the micro-batching queue)
→ the encoder (:mod:`encoding.encoder`, ONNX Runtime) and ``search``/``granularity`` (over
:class:`index.Collection`, opened by :func:`index.catalog.catalog_for`);
``startup`` builds the runtime from the settings and the bundle.
Never imports torch or ``training``.
"""
