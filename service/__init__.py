"""The HTTP service: serves a bundle's embeddings and searches stored documents.

Layers, each talking to the next through small types: ``routes`` (HTTP and schemas, no maths)
→ ``runtime`` (the loaded service and its operations) → ``batching`` (the micro-batching queue)
→ ``encoder`` (ONNX Runtime) and ``search``/``routing`` (over :class:`index.Collection`).
Never imports torch or ``training``.
"""
