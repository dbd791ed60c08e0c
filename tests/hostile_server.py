"""A hostile HTTP server for the boundary tests (issue 11): a real threaded server on 127.0.0.1:0.

Routes (GET unless noted):

* ``/page/small`` — a small HTML page (the innocent control);
* ``/big?mb=N`` — N MiB of text with a truthful Content-Length, generated lazily chunk by chunk
  (never built in memory) until the client stops reading;
* ``/trickle?bytes=N&shape=S`` — a body written one byte per second, framed as ``S`` (one of
  ``TRICKLE_SHAPES``, default ``length``; see ``trickle``);
* ``/redirect?to=URL`` — 302 to anything; ``/chain/N`` — N same-origin hops ending at ``/page/small``;
* ``/echo`` — the request's ``Authorization`` value echoed in many encodings (JSON body);
  ``/echo-text`` — the same as text/html; ``/echo-error`` — a 500 whose JSON message carries it;
* ``/echo-disguised`` — the ``Authorization`` value disguised (``disguised_encodings``) and split
  across adjacent fields (``split_in_fields``), as JSON; ``/echo-disguised-error`` — a 500 whose
  message carries the disguises;
* ``/json-error?kind=K`` — a 5xx/4xx whose JSON body is not an object (list, string, number,
  null, deep nesting, NaN, invalid JSON, a huge number);
* ``/status?code=N`` — any status code, body ``{}``.

Every request is logged (method, path, headers) so a test can show what was (not) reached.
"""
from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

CHUNK = b"All work and no play makes a hostile page. " * 1489 + b"\n"  # ~64 KiB


def echo_encodings(value: str) -> dict[str, str]:
    raw = value.encode()
    return {
        "literal": value,
        "upper": value.upper(),
        "lower": value.lower(),
        "base64": base64.b64encode(raw).decode(),
        "base64_nopad": base64.b64encode(raw).decode().rstrip("="),
        "base64url": base64.urlsafe_b64encode(raw).decode(),
        "base64_in_blob": base64.b64encode(b'{"seen":"' + raw + b'","n":1}').decode(),
        "base64url_in_blob": base64.urlsafe_b64encode(b"xx" + raw + b"yy").decode().rstrip("="),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "percent": "".join("%%%02X" % b for b in raw),
        "urlquote": quote(value, safe=""),
        "json_u": "".join("\\u%04x" % ord(c) for c in value),
    }


def disguised_encodings(value: str) -> dict[str, str]:
    """Issue 29: forms the first matcher missed — base32, nested encodings, HTML entities,
    separators, invisible characters, fullwidth."""
    raw = value.encode()
    b64 = base64.b64encode
    wrapped = b64(raw).decode()
    return {
        "base32": base64.b32encode(raw).decode(),
        "base32_lower_nopad": base64.b32encode(raw).decode().rstrip("=").lower(),
        "base32_in_blob": base64.b32encode(b"u=" + raw + b";").decode(),
        "base64_twice": b64(b64(raw)).decode(),
        "base64_twice_in_blob": b64(b'{"a":"' + b64(b"x" + raw) + b'"}').decode(),
        "base64_of_hex": b64(raw.hex().encode()).decode(),
        "hex_of_base64": b64(raw).hex(),
        "percent_of_base64": "".join("%%%02X" % c for c in b64(raw)),
        "base64_of_percent": b64("".join("%%%02X" % c for c in raw).encode()).decode(),
        "base32_of_base64": base64.b32encode(b64(raw)).decode(),
        "html_decimal": "".join("&#%d;" % ord(c) for c in value),
        "html_hex_padded": "".join("&#x%04X" % ord(c) for c in value),  # no semicolons
        "spaced": " ".join(value),
        "zero_width": "\u200b".join(value),
        "soft_hyphen_word_joiner": "".join(c + ("\u00ad" if i % 2 else "\u2060") for i, c in enumerate(value)),
        "dotted_upper": ".".join(value.upper()),
        "fullwidth": "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value),
        "base64_wrapped": "\r\n".join(wrapped[i:i + 8] for i in range(0, len(wrapped), 8)),  # MIME-style lines
    }


def split_in_fields(value: str) -> dict:
    """The value cut into parts held by adjacent fields: two object values, an array of chunks,
    an array of single characters, a key and its value."""
    half = len(value) // 2
    return {
        "parts": {"part_1": value[:half], "part_2": value[half:]},
        "chunks": [value[i:i + 5] for i in range(0, len(value), 5)],
        "letters": list(value),
        "keyed": {value[:half]: value[half:]},
    }


JSON_ERRORS = {
    "list": b"[1, 2, 3]", "string": b'"boom"', "number": b"42", "null": b"null", "true": b"true",
    "deep": b"[" * 5000 + b"]" * 5000, "nan": b'{"message": NaN}', "invalid": b"{not json",
    "bignum": b"1" + b"0" * 5000, "message_list": b'{"message": ["a", {"b": 1}], "error": 7}',
    "dupkeys": b'{"message": "a", "message": "b"}',
}


# How a trickled answer is framed (``trickle``). The first two end with the connection: a client
# that holds only the connection's socket loses it to the response (http.client hands it over).
TRICKLE_SHAPES = (
    "http10",   # HTTP/1.0 announcing its length: an HTTP/1.0 answer always ends with the connection
    "close",    # HTTP/1.1, Connection: close and no length: the body is whatever comes before the close
    "chunked",  # HTTP/1.1, Transfer-Encoding: chunked, one byte per chunk
    "length",   # HTTP/1.1, kept alive, Content-Length
    "headers",  # HTTP/1.1 with Content-Length, its status line and headers written one byte per second too
)


def trickle(handler: BaseHTTPRequestHandler, body: bytes, *, shape: str, content_type: str, every: float = 1.0) -> None:
    """Answer 200 with ``body`` written one byte every ``every`` seconds, framed as ``shape``,
    until it is all sent or the client goes away."""
    framing = {"http10": ("HTTP/1.0", f"Content-Length: {len(body)}"), "close": ("HTTP/1.1", "Connection: close"),
               "chunked": ("HTTP/1.1", "Transfer-Encoding: chunked")}
    version, frame = framing.get(shape, ("HTTP/1.1", f"Content-Length: {len(body)}"))
    head = f"{version} 200 OK\r\nContent-Type: {content_type}\r\n{frame}\r\n\r\n".encode()
    handler.close_connection = True  # whatever the shape, the client stops reading before the end
    slow = [bytes([b]) for b in body]
    if shape == "chunked":
        slow = [b"1\r\n" + byte + b"\r\n" for byte in slow] + [b"0\r\n\r\n"]
    if shape == "headers":
        slow = [bytes([b]) for b in head] + slow
    else:
        handler.wfile.write(head)
    try:
        for piece in slow:
            handler.wfile.write(piece)
            handler.wfile.flush()
            time.sleep(every)
    except (BrokenPipeError, ConnectionResetError):
        pass


class Handler(BaseHTTPRequestHandler):
    server: "HostileServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass

    def do_GET(self):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with self.server.lock:
            self.server.log.append({"method": self.command, "path": self.path, "headers": dict(self.headers.items())})
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        route = url.path.rstrip("/") or "/"
        try:
            if route == "/page/small":
                return self._send(200, b"<html><body><p>Just a small page.</p></body></html>", "text/html; charset=utf-8")
            if route == "/big":
                return self._big(int(query.get("mb", "300")))
            if route == "/trickle":
                body = b"." * int(query.get("bytes", "120"))
                return trickle(self, body, shape=query.get("shape", "length"), content_type="text/plain; charset=utf-8")
            if route == "/redirect":
                return self._send(302, b"", "text/plain", Location=query.get("to", ""))
            if route.startswith("/chain/"):
                n = int(route.rsplit("/", 1)[1])
                return self._send(302, b"", "text/plain", Location="/page/small" if n <= 1 else f"/chain/{n - 1}")
            if route in ("/echo", "/echo-text", "/echo-error"):
                return self._echo(route)
            if route in ("/echo-disguised", "/echo-disguised-error"):
                return self._echo_disguised(route)
            if route == "/json-error":
                kind = query.get("kind", "list")
                return self._send(int(query.get("status", "500")), JSON_ERRORS[kind], "application/json")
            if route == "/status":
                return self._send(int(query.get("code", "200")), b"{}", "application/json")
            return self._send(404, b'{"error":"not_found"}', "application/json")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_POST = do_PUT = do_DELETE = do_GET

    def _send(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _big(self, mb: int) -> None:
        total = mb * 1024 * 1024
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(total))
        self.end_headers()
        sent = 0
        while sent < total:  # lazily: one reused chunk, written until the client hangs up
            piece = CHUNK[: total - sent]
            self.wfile.write(piece)
            sent += len(piece)
        with self.server.lock:
            self.server.big_completed += 1

    def _echo(self, route: str) -> None:
        seen = self.headers.get("Authorization", "")
        encodings = echo_encodings(seen)
        if route == "/echo-text":
            body = "<html><body>" + "".join(f"<p>{k}: {v}</p>" for k, v in encodings.items()) + "</body></html>"
            return self._send(200, body.encode(), "text/html; charset=utf-8")
        if route == "/echo-error":
            message = " ".join(encodings.values())
            return self._send(500, json.dumps({"message": message, "error": encodings["base64"]}).encode(), "application/json")
        # Also as raw \u escapes in the JSON text itself (json.dumps with ensure_ascii=True of escapes).
        body = json.dumps({"seen": encodings, "raw_escaped": seen}, ensure_ascii=True)
        body = body.replace(json.dumps(seen)[1:-1], "".join("\\u%04x" % ord(c) for c in seen)) if seen else body
        return self._send(200, body.encode(), "application/json")


    def _echo_disguised(self, route: str) -> None:
        seen = self.headers.get("Authorization", "")
        disguised = disguised_encodings(seen)
        if route == "/echo-disguised-error":
            return self._send(500, json.dumps({"message": " | ".join(disguised.values())}).encode(), "application/json")
        body = {"disguised": disguised, "split": split_in_fields(seen),
                "page": f"Welcome back! Your session: {disguised['zero_width']}. Renew with {disguised['html_decimal']}."}
        return self._send(200, json.dumps(body).encode(), "application/json")


class HostileServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.log: list[dict] = []
        self.big_completed = 0
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def port(self) -> int:
        return self.server_address[1]

    def paths(self) -> list[str]:
        with self.lock:
            return [entry["path"] for entry in self.log]

    def start(self) -> "HostileServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
