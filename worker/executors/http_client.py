"""The one way an executor talks HTTP: egress-checked, address-pinned, deadlined and capped.

``send(request, policy)`` (docs/concepts/admission.md Egress, issue 11):

1. every hop — the first URL and each redirect — is checked before anything is sent: http(s)
   only (``file:``/``gopher:``… refused, permanently); in the grants' scope when the URL came
   from the model or a remote (``toolops.decisions.egress``); a redirect from a ToolSpec's fixed
   endpoint must stay on its origin;
2. the host is resolved **once**, every address is checked against the deny-list (loopback,
   private, link-local, … only opened by a grant or the operator naming that IP and port), and
   the connection goes to the checked address — the ``Host`` header and TLS SNI/certificate
   check still use the name, so DNS cannot answer differently between check and connect;
3. redirects are followed only up to ``policy.follow_redirects`` (default 0: a 3xx is the
   answer), and secret headers never follow a redirect to another origin;
4. one wall-clock deadline (``policy.deadline``, ``time.monotonic()``) covers resolve, connect,
   send and the whole read: a watchdog shuts the socket when it passes — held from the moment it
   is connected, whoever reads from it then (an answer that ends with the connection owns it) —
   so a server trickling one byte a second, however it frames the body, cannot hold the attempt
   longer;
5. the body is read in chunks and reading stops past ``policy.max_response_bytes``: memory stays
   flat whatever the server sends. ``Accept-Encoding: identity`` is sent and a compressed answer
   is not decoded (a small gzip body can expand without bound).

Only the status, the body (as read) and three harmless headers come back — never the request
or response headers as a whole, so credentials and cookies are never stored.
"""
from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping

import certifi
from urllib3.connection import HTTPConnection, HTTPSConnection

from worker.egress_net import TransportFailure, checked_address, resolve  # noqa: F401 - checked_address: the MCP executor's
from toolops.decisions.egress import (
    OUT_OF_SCOPE, EgressRefused, Target, check_addresses, hop_in_scope, openers_from_grants, redirect_target, target_for,
)

REDIRECT_STATUSES = (301, 302, 303, 307, 308)
CHUNK_BYTES = 64 * 1024
KEPT_HEADERS = ("content-type", "retry-after", "content-encoding")


@dataclass(frozen=True)
class HttpRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None = None
    secret_headers: frozenset[str] = frozenset()  # lower-case names dropped on a cross-origin hop


@dataclass(frozen=True)
class EgressPolicy:
    deadline: float  # time.monotonic() by which everything must be over
    max_response_bytes: int
    follow_redirects: int = 0
    # The URL came from the model: each hop must fall in one of these grants' scopes.
    url_from_arguments: bool = False
    grants: tuple[Mapping, ...] = ()
    # (ip, port) pairs a denied address may still be reached on (named by grants or the operator).
    openers: frozenset[tuple[str, int]] = frozenset()
    # Response headers kept beyond KEPT_HEADERS (lower-case), e.g. the ToolSpec's cost header.
    keep_headers: tuple[str, ...] = ()


@dataclass
class HttpResponse:
    status: int
    reason: str
    headers: dict[str, str]  # only KEPT_HEADERS (+ the policy's keep_headers), lower-case names
    body: bytes
    truncated: bool  # reading stopped at the cap: ``body`` is the first bytes only
    hops: list[str] = field(default_factory=list)  # every URL requested, in order


def send(request: HttpRequest, policy: EgressPolicy) -> HttpResponse:
    """Send ``request`` under ``policy``; ``EgressRefused`` (nothing sent) or ``TransportFailure``."""
    target = target_for(request.url)
    first_origin = target.parts.origin
    openers = set(policy.openers) | openers_from_grants(policy.grants)
    method, body, headers = request.method.upper(), request.body, dict(request.headers)
    hops: list[str] = []
    for hop in range(policy.follow_redirects + 1):
        _authorize_hop(target, policy, first_origin, hop)
        address = check_addresses(target, resolve(target, policy.deadline), openers)
        hops.append(target.url)
        response = _exchange(address, target, method, headers, body, policy)
        response.hops = hops
        location = response.headers.pop("location", None)
        if response.status not in REDIRECT_STATUSES or hop == policy.follow_redirects:
            return response
        following = redirect_target(target, location)
        if following.parts.origin != target.parts.origin:
            headers = {k: v for k, v in headers.items() if k.lower() not in request.secret_headers}
        if response.status == 303 or (response.status in (301, 302) and method == "POST"):
            method, body = "GET", None  # what every client does; 307/308 keep method and body
        target = following
    raise AssertionError("unreachable")  # the loop returns on its last hop


def _authorize_hop(target: Target, policy: EgressPolicy, first_origin, hop: int) -> None:
    if policy.url_from_arguments:
        if not hop_in_scope(target, policy.grants):
            where = "the URL" if hop == 0 else f"redirect hop {hop}"
            raise EgressRefused(OUT_OF_SCOPE, f"{where} is outside the granted URL scope")
    elif hop and target.parts.origin != first_origin:
        raise EgressRefused(OUT_OF_SCOPE, f"redirect hop {hop} leaves the tool's configured origin")


class _Watchdogs:
    """One thread per process shuts the socket of every exchange still running at its deadline,
    whatever the reading thread is blocked in. A timer thread per request cost a thread start
    and its hand-off on every call (measured on the MCP front door's inline reads); this one is
    started lazily, again after a fork (Celery's prefork children), and sleeps until the
    earliest deadline. A finished exchange is dropped from the heap when its deadline comes."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.heap: list[tuple[float, int, _Watch]] = []
        self.seq = itertools.count()
        self.pid: int | None = None

    def watch(self, deadline: float) -> "_Watch":
        watch = _Watch()
        with self.cond:
            if self.pid != os.getpid():
                self.pid, self.heap = os.getpid(), []
                threading.Thread(target=self._run, name="http-deadlines", daemon=True).start()
            heapq.heappush(self.heap, (deadline, next(self.seq), watch))
            if self.heap[0][2] is watch:
                self.cond.notify()  # an earlier deadline than the one it sleeps towards
        return watch

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.heap:
                    self.cond.wait()
                deadline, _, watch = self.heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self.cond.wait(wait)
                    continue
                heapq.heappop(self.heap)
            watch.fire()


class _Watch:
    """One exchange's hold on its socket, from the moment it is connected to the end.

    The connection's own ``sock`` cannot be relied on: for an answer that ends with the
    connection (HTTP/1.0, ``Connection: close``, no length) ``http.client`` hands the socket to
    the response and sets ``sock`` to None, and a TLS wrap detaches the socket object it
    started from. A duplicate descriptor names the same socket through both, and ``shutdown()``
    on it ends the connection for every descriptor (``close()`` would not)."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.fired = self.ended = False
        self.lock = threading.Lock()

    def hold(self, sock: socket.socket) -> None:
        """Called by the connection with its socket, just connected."""
        held = sock.dup()
        with self.lock:
            self.sock = held
            if self.fired:  # the deadline passed while it was connecting
                _shut(held)

    def fire(self) -> None:
        with self.lock:
            if self.ended:
                return  # the exchange ended in time
            self.fired = True
            if self.sock is not None:
                _shut(self.sock)

    def __enter__(self) -> "_Watch":
        return self

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.ended = True  # no longer shut at the deadline
            if self.sock is not None:
                self.sock.close()
                self.sock = None


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # the peer closed it already


WATCHDOGS = _Watchdogs()


class _Held:
    """A connection that gives its socket to the exchange's watch as soon as it is connected
    (urllib3 makes every socket in ``_new_conn``; the TLS handshake comes after it)."""

    watch: _Watch

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        self.watch.hold(sock)
        return sock


class _HeldHTTPConnection(_Held, HTTPConnection):
    pass


class _HeldHTTPSConnection(_Held, HTTPSConnection):
    pass


def _connection(address: str, target: Target, timeout: float, watch: _Watch) -> HTTPConnection:
    if target.parts.scheme == "https":
        conn = _HeldHTTPSConnection(
            address, target.parts.port, timeout=timeout, server_hostname=target.parts.host,
            assert_hostname=target.parts.host, cert_reqs="CERT_REQUIRED", ca_certs=certifi.where(),
        )
    else:
        conn = _HeldHTTPConnection(address, target.parts.port, timeout=timeout)
    conn.watch = watch
    return conn


def _exchange(address: str, target: Target, method: str, headers: dict, body: bytes | None,
              policy: EgressPolicy) -> HttpResponse:
    remaining = policy.deadline - time.monotonic()
    if remaining <= 0:
        raise TransportFailure("the attempt deadline passed before the request was sent", reached=False, deadline=True)
    sent, raw = False, None
    with WATCHDOGS.watch(policy.deadline) as watchdog:
        conn = _connection(address, target, remaining, watchdog)
        try:
            conn.connect()
            sent = True  # from the first byte written the tool may act
            conn.request(
                method, target.request_target, body=body,
                headers={**headers, "Host": target.host_header, "Accept-Encoding": "identity"},
                preload_content=False, decode_content=False,
            )
            raw = conn.getresponse()
            status, reason = int(raw.status), str(raw.reason or "")
            kept = {name: str(raw.headers.get(name)) for name in KEPT_HEADERS + policy.keep_headers
                    if raw.headers.get(name) is not None}
            if status in REDIRECT_STATUSES and raw.headers.get("location") is not None:
                kept["location"] = str(raw.headers.get("location"))
            data, truncated = _read_capped(raw, policy.max_response_bytes)
        except Exception as exc:  # noqa: BLE001 - every transport error is classified, none escapes
            if watchdog.fired:
                raise TransportFailure("the attempt deadline passed", reached=sent, deadline=True) from None
            raise TransportFailure(f"{type(exc).__name__} talking to the tool", reached=sent) from None
        finally:
            if raw is not None:
                raw.close()  # an answer that ends with the connection holds the socket, not ``conn``
            conn.close()
        if watchdog.fired and not truncated:
            # The socket was shut under the read: what arrived may be cut short anywhere.
            raise TransportFailure("the attempt deadline passed", reached=True, deadline=True)
    return HttpResponse(status=status, reason=reason, headers=kept, body=data, truncated=truncated)


def _read_capped(raw, cap: int) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of the body, and whether more was on offer (reading stops there)."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = raw.read(min(CHUNK_BYTES, cap + 1 - total))
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            return b"".join(chunks)[:cap], True


def secret_header_names(config_headers: Mapping[str, object] | None) -> frozenset[str]:
    """Lower-case names of the headers whose values come from server-side secrets."""
    return frozenset(
        name.lower() for name, value in (config_headers or {}).items() if isinstance(value, str) and value.startswith("secret:")
    )


def grants_for_egress(authorization: Mapping | None) -> tuple[Mapping, ...]:
    """The grant snapshots an invocation was authorized with (their scopes bound every hop);
    ``invocations_app.authorization`` stores them as ``capabilities``."""
    grants = (authorization or {}).get("capabilities") or ()
    return tuple(g for g in grants if isinstance(g, Mapping))

