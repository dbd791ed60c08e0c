"""A demo webhook receiver: verifies ToolOps' signatures and shows what it got.

    python -m demo_services.webhook_receiver --port 8767 --secret whsec_demo

* ``POST /webhooks`` — checks ``ToolOps-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``
  against the raw body, refusing a timestamp more than 300 s away (replay window): 204 when
  valid, 401 otherwise; every request is kept, verified or not, with the reason.
* ``GET /`` — an HTML page of what arrived; ``GET /webhooks/received`` — the same as JSON.
* ``POST /_control/fail`` ``{"count": n, "status": 503}`` — answer the next n valid deliveries
  with that status (to watch ToolOps retry with backoff); ``POST /_control/reset`` — forget all.

Written from the documented header format alone (no ToolOps import), as a real receiver would be.
No Django here on purpose: this process plays an external system.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import html
import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLAY_WINDOW_SECONDS = 300
MAX_BODY = 1 << 20


def verify(secret: str, header: str, body: bytes, now: float) -> tuple[bool, str]:
    """Is ``header`` a fresh signature of ``body`` with ``secret``? ``(ok, why not)``."""
    fields: dict[str, list[str]] = {}
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        fields.setdefault(key, []).append(value)
    stamp = (fields.get("t") or [""])[0]
    if not stamp.isdigit() or not fields.get("v1"):
        return False, "no t= or v1= in ToolOps-Signature"
    if abs(now - int(stamp)) > REPLAY_WINDOW_SECONDS:
        return False, "stale timestamp (replay window is 300 s)"
    mac = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(mac, given) for given in fields["v1"]):
        return False, "bad signature"
    return True, ""


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, secret: str):
        self.secret = secret
        self.lock = threading.Lock()
        self.received: list[dict] = []
        self.failures: list[int] = []  # statuses to answer the next valid deliveries with
        super().__init__(address, Handler)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def record(self, headers, body: bytes) -> tuple[int, dict]:
        ok, why = verify(self.secret, headers.get("ToolOps-Signature", ""), body, time.time())
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        with self.lock:
            status = (self.failures.pop(0) if self.failures else 204) if ok else 401
            entry = {
                "n": len(self.received) + 1, "received_at": time.time(), "verified": ok, "why": why, "answered": status,
                "event": headers.get("ToolOps-Event", ""), "delivery": headers.get("ToolOps-Delivery", ""), "payload": payload,
            }
            self.received.append(entry)
        return status, entry


class Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, fmt, *args):  # quiet: the page shows what arrived
        pass

    def _reply(self, status: int, body: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(min(length, MAX_BODY))

    def do_POST(self):
        body = self._body()
        if self.path == "/webhooks":
            status, entry = self.server.record(self.headers, body)
            return self._reply(status, b"" if status == 204 else json.dumps({"verified": entry["verified"], "why": entry["why"]}).encode())
        if self.path == "/_control/fail":
            spec = json.loads(body or b"{}")
            with self.server.lock:
                self.server.failures = [int(spec.get("status", 503))] * int(spec.get("count", 1))
            return self._reply(200, b'{"ok": true}')
        if self.path == "/_control/reset":
            with self.server.lock:
                self.server.received, self.server.failures = [], []
            return self._reply(200, b'{"ok": true}')
        return self._reply(404, b'{"error": "not_found"}')

    def do_GET(self):
        with self.server.lock:
            received = list(self.server.received)
        if self.path == "/webhooks/received":
            return self._reply(200, json.dumps({"received": received}).encode())
        if self.path == "/":
            rows = "".join(
                f"<tr><td>{e['n']}</td><td>{html.escape(e['event'])}</td><td>{'✔ verified' if e['verified'] else '✘ ' + html.escape(e['why'])}"
                f"</td><td>{e['answered']}</td><td><pre>{html.escape(json.dumps(e['payload'], indent=1))}</pre></td></tr>"
                for e in reversed(received))
            page = (f"<!doctype html><meta charset=utf-8><title>Webhooks received</title><h1>Webhooks received ({len(received)})</h1>"
                    f"<table border=1><tr><th>#</th><th>event</th><th>signature</th><th>answered</th><th>payload</th></tr>{rows}</table>")
            return self._reply(200, page.encode(), "text/html; charset=utf-8")
        return self._reply(404, b'{"error": "not_found"}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8767)
    parser.add_argument("--secret", required=True, help="the endpoint's signing secret (as configured in the ToolOps admin)")
    args = parser.parse_args()
    server = Receiver((args.host, args.port), args.secret)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"webhook receiver on {server.base_url}/webhooks", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
