#!/opt/milvus-lite/bin/python
"""``milvus run standalone`` of the stand-in image: runs ``milvus-lite server`` on :19530 with its
data in /var/lib/milvus, and answers :9091/healthz with 200 once that port accepts connections,
as Milvus standalone's health endpoint does once it serves."""

import http.server
import os
import socket
import subprocess
import sys
import threading

PORT = 19530


def _serving() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=1):
            return True
    except OSError:
        return False


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        ok = self.path.startswith("/healthz") and _serving()
        self.send_response(200 if ok else 503)
        self.end_headers()
        self.wfile.write(b"OK" if ok else b"not serving")

    def log_message(self, *args: object) -> None:
        pass


if sys.argv[1:] != ["run", "standalone"]:
    sys.exit(f"milvus stand-in: only `milvus run standalone` is provided, not {sys.argv[1:]}")
health = http.server.ThreadingHTTPServer(("0.0.0.0", 9091), Health)
threading.Thread(target=health.serve_forever, daemon=True).start()
server = [
    os.path.join(os.path.dirname(sys.executable), "milvus-lite"),
    "server",
    "--data-dir",
    "/var/lib/milvus",
    "--port",
    str(PORT),
    "--max-workers",
    "1",
]
sys.exit(subprocess.call(server))
