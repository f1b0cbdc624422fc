"""A stub answering Grafana's health endpoint on :3000 (no Grafana image can be had here): it says
which provisioning files compose mounted, so the check sees that the mounts arrive."""

import http.server
import json
import os

PROVISIONING = "/etc/grafana/provisioning"


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        found = sorted(os.listdir(PROVISIONING)) if os.path.isdir(PROVISIONING) else None
        body = json.dumps({"database": "ok", "stub": True, "provisioning": found}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(("0.0.0.0", 3000), Health).serve_forever()
