"""A tiny HTTP/1.1 proxy in front of a live ToolOps, to break what a client meets on the way.

Each accepted connection carries one request, forwarded upstream with ``Connection: close``; a
``rule`` (a callable of the request's method, path and headers, and how many matching requests
came before) may instead answer it itself or forward it and then *drop* the connection — so the
server has done (and committed) the work, and the client never hears of it.
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    at: float
    action: str


@dataclass
class Proxy:
    upstream_port: int
    rule: object = None  # (Seen, n_before) -> "forward" | "drop_after_forward" | bytes (a raw answer)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.sock.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket):
        with conn:
            request = _read_request(conn)
            if request is None:
                return
            head, body = request
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
            with self._lock:
                before = sum(1 for s in self.seen if s.method == method and s.path.split("?")[0] == path.split("?")[0])
                seen = Seen(method, path, headers, time.monotonic(), "forward")
                action = self.rule(seen, before) if self.rule else "forward"
                seen.action = action if isinstance(action, str) else "answered"
                self.seen.append(seen)
            if isinstance(action, bytes):
                conn.sendall(action)
                return
            forwarded = [lines[0]] + [line for line in lines[1:] if not line.lower().startswith("connection:")]
            answer = _exchange(self.upstream_port, ("\r\n".join(forwarded) + "\r\nConnection: close\r\n\r\n").encode("latin-1") + body)
            if action == "drop_after_forward":
                conn.shutdown(socket.SHUT_RDWR)  # the server answered; the client hears nothing
                return
            conn.sendall(answer)


def _read_request(conn: socket.socket) -> tuple[bytes, bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        body += conn.recv(65536)
    return head, body


def _exchange(port: int, raw: bytes) -> bytes:
    """Send one request upstream and read the whole answer (the upstream closes after it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as up:
        up.sendall(raw)
        answer = b""
        while chunk := up.recv(65536):
            answer += chunk
    return answer


def problem_answer(status: int, code: str, retry_after: int) -> bytes:
    body = f'{{"type":"about:blank","status":{status},"code":"{code}","title":"x","detail":"try later"}}'.encode()
    return (f"HTTP/1.1 {status} X\r\nContent-Type: application/problem+json\r\nRetry-After: {retry_after}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
