"""Talking to an upstream MCP server with the official SDK ``Client``, from synchronous code.

Celery workers, the MCP front door's database threads and management commands are synchronous;
each call here hands the async client to this process's one upstream event loop (a daemon
thread, ``_UpstreamLoop``) and waits for it under one wall-clock deadline (``anyio.fail_after``).
Every response is read through a byte cap (a wrapping httpx transport; one cap for all the pages
of a listing), so a slow or huge answer cannot hold a worker. No Django here: callers pass the
URL, the headers (credentials resolved by them) and the limits.

Reads (``keep_connection=True``) reuse this process's HTTP connection and an idle MCP session
to the upstream for a short while (``KEPT_IDLE_SECONDS``), which saves the TCP connect and the
session's set-up per call; writes always open a connection and a session of their own, so a
keep-alive connection the server is closing at that moment can never turn a write into an
unknown outcome. A session serves one call at a time; any failure closes the endpoint's
connections and sessions.

What a failure means is decided by *when* it happened, because that is what the commit boundary
depends on: anything before the ``tools/call`` request was written (connect, version probe,
the pin check) provably did not reach the tool; a failure after it may have.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import hashlib
import json
import os
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from toolops.model_io.mcp_definitions import observed_sha256

# Phases of one exchange, in order: a failure in the first three never reached the tool.
CONNECT, LIST, VERIFY, SEND = "connect", "list", "verify", "send"


class ResponseTooLarge(Exception):
    """The upstream's response went past the cap; the rest was not read."""


class OffOrigin(Exception):
    """The client tried to send somewhere other than the checked upstream origin."""


class BadListing(Exception):
    """The upstream's ``tools/list`` pages would not end: a cursor came again, or the page limit passed."""


@dataclass(frozen=True)
class Pin:
    """Where the egress check said the upstream is: every request must go to this origin, and
    connects to ``address`` (checked once; never resolved again) while ``Host`` and TLS still
    use the name."""

    scheme: str
    host: str
    port: int
    address: str


class UpstreamFailure(Exception):
    """One exchange failed. ``reached``: the ``tools/call`` may have been processed.

    ``message`` is ToolOps' own account; ``remote_message`` what the upstream (or the SDK about
    the upstream's answer) said, which is outside text: a model may read it only as untrusted
    data. ``str()`` has both, for operators."""

    def __init__(self, kind: str, message: str, *, phase: str, reached: bool, code: int | None = None,
                 http_status: int | None = None, remote_message: str | None = None):
        super().__init__(message + (f": {remote_message}" if remote_message else ""))
        self.kind, self.phase, self.reached, self.code, self.http_status = kind, phase, reached, code, http_status
        self.message, self.remote_message = message, remote_message


class DefinitionDrift(Exception):
    """The upstream's live definition differs from the pinned one (checked before sending)."""

    def __init__(self, observed: dict | None):
        super().__init__("upstream definition differs from the pin" if observed else "upstream no longer lists the tool")
        self.observed = observed


@dataclass
class CallResult:
    is_error: bool
    structured: Any
    content: list[dict]
    listed: dict | None = None  # the live definition the call was checked against (None: not listed this time)
    detail: dict = field(default_factory=dict)


class _ByteBudget:
    """What an exchange may still read: of one response, or of all the pages of one listing."""

    def __init__(self, limit: int, what: str):
        self.limit, self.left, self.what = limit, limit, what

    def spend(self, nbytes: int) -> None:
        self.left -= nbytes
        if self.left < 0:
            raise ResponseTooLarge(f"{self.what} larger than {self.limit} bytes")


# A JSON-RPC error is a few hundred bytes: an answer longer than this is never vouched for as one.
_ANSWER_KEPT_BYTES = 64 << 10


class _CallAnswer:
    """The HTTP answer to the ``tools/call`` POST, and the start of its body: what tells the
    upstream's own JSON-RPC error from one the SDK made up for an answer it could not use."""

    def __init__(self, request: httpx2.Request, response: httpx2.Response):
        self.request, self.status = request, response.status_code
        self.content_type = response.headers.get("content-type", "").lower()
        self.body: bytearray | None = bytearray()  # None: longer than _ANSWER_KEPT_BYTES

    def keep(self, chunk: bytes) -> None:
        if self.body is not None:
            self.body += chunk
            if len(self.body) > _ANSWER_KEPT_BYTES:
                self.body = None

    def carried_error(self, code: int) -> bool:
        """Whether the upstream itself answered with JSON-RPC error ``code``: a 2xx (not 202)
        whose JSON body, or whose event stream's first answer, parses as that error — read as
        ``mcp.client.streamable_http`` reads it. The SDK makes up -32700 for a body or event
        that does not parse and -32600 for a 202 or another content type, after the call was
        received: those say nothing about whether the tool ran."""
        if not 200 <= self.status < 300 or self.status == 202 or self.body is None:
            return False
        if self.content_type.startswith("application/json"):
            message = _jsonrpc_message(bytes(self.body))
        elif self.content_type.startswith("text/event-stream"):
            message = self._first_event_answer()
        else:
            return False
        return isinstance(message, types.JSONRPCError) and message.error.code == code

    def _first_event_answer(self):
        response = httpx2.Response(self.status, headers={"content-type": self.content_type}, content=bytes(self.body),
                                   request=self.request)
        try:
            for event in httpx2.EventSource(response, max_event_size=None):
                if event.event != "message" or not event.data:
                    continue
                message = _jsonrpc_message(event.data)
                if message is None or isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                    return message  # the SDK stops at the first answer, or the first event it cannot parse
        except httpx2.SSEError:
            return None
        return None


def _jsonrpc_message(data: bytes | str):
    try:
        return types.jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValidationError:
        return None


def _is_tool_call(request: httpx2.Request) -> bool:
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return False
    return isinstance(message, dict) and message.get("method") == "tools/call"


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner, budget: _ByteBudget, exchange: dict, answer: _CallAnswer | None = None):
        self.inner, self.budget, self.exchange, self.answer = inner, budget, exchange, answer

    async def __aiter__(self):
        try:
            async for chunk in self.inner:
                self.budget.spend(len(chunk))
                if self.answer is not None:
                    self.answer.keep(chunk)
                yield chunk
        except Exception as exc:
            _note_transport_failure(self.exchange, exc)
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()


# The exchange under way in this task: its phase, its endpoint key, the byte cap, the last POST's
# HTTP status before the call and the call's own answer (``call_answer``). The SDK runs each POST
# in a task of the sender's context, so a connection shared by concurrent calls still reports
# to the call that made the request.
_EXCHANGE: contextvars.ContextVar[dict] = contextvars.ContextVar("toolops_mcp_exchange")


def _note_transport_failure(exchange: dict, exc: Exception) -> None:
    # On a kept session the transport fails in the session's own task and the call only sees
    # "connection closed": the call reads the real cause (timeout, cap, drop) from here.
    exchange.setdefault("transport_failure", exc)


class _CappedTransport(httpx2.AsyncBaseTransport):
    """Streams each response body through a byte counter that stops at the current exchange's
    cap (one cap for all the pages of a listing), notes the HTTP status of its POSTs (the SDK
    folds a non-2xx answer into a generic JSON-RPC error) and, with a ``pin``, sends only to the
    pinned origin, connecting to its checked address."""

    def __init__(self, pin: Pin | None = None, limits: httpx2.Limits | None = None):
        self.inner = httpx2.AsyncHTTPTransport(verify=_ssl_context(), **({"limits": limits} if limits else {}))
        self.pin = pin

    def _pinned(self, request):
        pin, url = self.pin, request.url
        port = url.port or {"http": 80, "https": 443}.get(url.scheme)
        if (url.scheme, url.host, port) != (pin.scheme, pin.host, pin.port):
            raise OffOrigin(f"refused to send to {url.scheme}://{url.host}:{port}: not the upstream's origin")
        request.url = url.copy_with(host=pin.address)  # the Host header was set from the name already
        request.extensions = {**request.extensions, "sni_hostname": pin.host}
        return request

    async def handle_async_request(self, request):
        exchange = _EXCHANGE.get()
        try:
            if self.pin is not None:
                request = self._pinned(request)
            response = await self.inner.handle_async_request(request)
        except Exception as exc:
            _note_transport_failure(exchange, exc)
            raise
        budget, answer = _ByteBudget(exchange["max_bytes"], "response"), None
        # Only a POST answers a request of ours: the GET event stream's and the DELETE that ends
        # a legacy session (sent before an error is classified; 405 is allowed) say nothing of it.
        if request.method == "POST":
            if exchange["phase"] != SEND:
                exchange["http_status"] = response.status_code
            elif "call_answer" not in exchange and _is_tool_call(request):
                answer = exchange["call_answer"] = _CallAnswer(request, response)
            if exchange["phase"] == LIST:  # one budget for every page: a paginator cannot multiply the cap
                budget = exchange.setdefault("listing_budget", _ByteBudget(exchange["max_bytes"], "listing"))
        response.stream = _CappedStream(response.stream, budget, exchange, answer)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~35 ms; one context per process serves every session.
    return ssl.create_default_context()


def _http_client(headers: dict[str, str], timeout: float, pin: Pin | None = None,
                 limits: httpx2.Limits | None = None) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        headers=headers, transport=_CappedTransport(pin, limits), follow_redirects=False,
        timeout=httpx2.Timeout(timeout),
    )


# A kept connection idle longer than this is closed, not reused: well inside the keep-alive
# timeouts servers commonly use (gunicorn 2 s, uvicorn and Node 5 s), so the server does not
# close it under a request.
KEPT_IDLE_SECONDS = 1.0
KEPT_CLIENTS_MAX = 64  # upstream endpoints (URL, address, credential) with a kept connection
_IDLE_SESSIONS_MAX = 8  # idle sessions (and connections) kept per endpoint: reads under way at once
_CLOSE_SECONDS = 2.0  # how long a closing session may take to leave (a legacy session's DELETE)
# A kept client's own timeouts never fire first: each call's deadline is its ``fail_after``.
_KEPT_TIMEOUT_SECONDS = 3600.0


class _Session:
    """An MCP session kept open on the upstream loop for reads, used by one call at a time.

    The SDK's client must be entered and left in one task, so the session lives in a task of
    its own (``own``) until ``close()``; a call uses it through ``call``. Only a 2026-07-28
    session is kept (``keepable``): its requests are self-contained, so the server holds nothing
    for it. A legacy one (``Mcp-Session-Id``, its own event stream) serves one call and is
    terminated, as a fresh session would be."""

    def __init__(self) -> None:
        self.client: Client | None = None
        self.task: asyncio.Task | None = None
        self.closing = asyncio.Event()
        self.idle_since = 0.0

    async def open(self, url: str, http: httpx2.AsyncClient, exchange: dict) -> None:
        """Open it for the call whose ``exchange`` this is: a handshake's HTTP status, cap and
        transport failure are that call's, as on a fresh session."""
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        ready.add_done_callback(_ignore_outcome)  # the caller may have stopped waiting for it

        async def own():
            _EXCHANGE.set(exchange)
            try:
                # The scope is entered before the client's own scopes and only gets a deadline
                # once closing starts: leaving the client (a legacy session's DELETE) is bounded.
                with anyio.CancelScope() as leaving:
                    async with _client(url, http) as client:
                        _remember(client)
                        ready.set_result(client)
                        await self.closing.wait()
                        leaving.deadline = anyio.current_time() + _CLOSE_SECONDS
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                    return
                raise

        self.task = loop.create_task(own(), context=contextvars.Context())
        try:
            self.client = await asyncio.shield(ready)
        except BaseException:
            self.task.cancel()  # it may still be connecting: the caller's deadline ends it too
            self.close()
            raise

    @property
    def keepable(self) -> bool:
        return self.client is not None and self.client.session.protocol_version in MODERN_PROTOCOL_VERSIONS

    async def call(self, coro_fn):
        """``coro_fn(client)`` in the caller's task. When the session's transport fails under
        it, the SDK only says "connection closed" to the caller: the failure the transport
        noted for this call (``_note_transport_failure``) is raised instead, or the session
        task's own error if it has just ended with one."""
        try:
            return await coro_fn(self.client)
        except MCPError as exc:
            exchange = _EXCHANGE.get()
            if exc.error.code == types.CONNECTION_CLOSED and "transport_failure" not in exchange:
                for _ in range(20):  # a task group being torn down ends within a few loop turns
                    if self.task.done():
                        break
                    await asyncio.sleep(0)
                if self.task.done() and not self.task.cancelled() and self.task.exception() is not None:
                    exchange["transport_failure"] = self.task.exception()
            if "transport_failure" in exchange:
                raise exchange["transport_failure"] from None
            raise

    def usable(self, now: float) -> bool:
        return self.task is not None and not self.task.done() and now - self.idle_since < KEPT_IDLE_SECONDS

    def close(self) -> None:
        self.closing.set()
        if self.task is not None:
            self.task.add_done_callback(_ignore_outcome)


def _ignore_outcome(future: asyncio.Future) -> None:
    # A session's task, or its opening, whose error the call has reported already (or whose
    # caller stopped waiting): read it, so asyncio does not log it as never retrieved.
    if not future.cancelled():
        future.exception()


class _Endpoint:
    """One upstream (URL, checked address, credential) with a kept HTTP client and the MCP
    sessions idle on it. Taken out of the table (evicted, expired, or after a failure), it
    closes its sessions and, once its last call is done and its sessions have ended, its
    client — never under a call."""

    def __init__(self, key: tuple, client: httpx2.AsyncClient) -> None:
        self.key, self.client, self.users, self.retired, self.closed = key, client, 0, False, False
        self.idle: list[_Session] = []
        self.sessions: set[asyncio.Task] = set()  # every session task still running on the client
        self.last_used = time.monotonic()

    async def session(self, url: str, exchange: dict) -> _Session:
        now = time.monotonic()
        while self.idle:
            session = self.idle.pop()
            if session.usable(now):
                return session
            session.close()
        session = _Session()
        await session.open(url, self.client, exchange)
        self.sessions.add(session.task)
        session.task.add_done_callback(self.sessions.discard)
        return session

    def give_back(self, session: _Session) -> None:
        if self.retired or not session.keepable or len(self.idle) >= _IDLE_SESSIONS_MAX:
            session.close()
            return
        session.idle_since = time.monotonic()
        self.idle.append(session)

    def expire(self, now: float) -> None:
        """Close the sessions idle for ``KEPT_IDLE_SECONDS``."""
        for session in [s for s in self.idle if not s.usable(now)]:
            self.idle.remove(session)
            session.close()

    def release(self) -> None:
        self.users -= 1
        self.last_used = time.monotonic()
        self.close_when_idle()

    def retire(self) -> None:
        if self.retired:
            return
        self.retired = True
        for session in self.idle:
            session.close()
        self.idle = []
        self.close_when_idle()

    def close_when_idle(self) -> None:
        if self.retired and self.users == 0 and not self.closed:
            self.closed = True
            asyncio.get_running_loop().create_task(self._close())

    async def _close(self) -> None:
        if self.sessions:  # they leave their clients first (a legacy session's DELETE needs this one)
            await asyncio.wait(set(self.sessions), timeout=_CLOSE_SECONDS + 1)
        await self.client.aclose()


class _UpstreamLoop:
    """This process's event loop for upstream exchanges, in a daemon thread started on first
    use (a forked child starts its own), and the endpoints kept on it for reads.

    Synchronous callers wait on ``run``; everything that touches a kept endpoint runs on the
    loop thread, so the table needs no lock of its own. A sweep on the loop closes sessions
    and endpoints that have been idle for ``KEPT_IDLE_SECONDS``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.kept: dict[tuple, _Endpoint] = {}  # insertion order: least recently used first
        self.sweep: asyncio.TimerHandle | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self.loop is None:
                loop = asyncio.new_event_loop()
                self.thread = threading.Thread(target=loop.run_forever, name="toolops-mcp-upstream", daemon=True)
                self.thread.start()
                self.loop = loop
            return self.loop

    def after_fork(self) -> None:
        self.lock, self.loop, self.thread, self.kept, self.sweep = threading.Lock(), None, None, {}, None

    def run(self, coro_fn, *, timeout: float):
        """``coro_fn()`` on the loop thread; the caller's deadline is enforced inside it, this
        wait only guards against a wedged loop."""
        loop = self._running_loop()
        if threading.current_thread() is self.thread:
            raise RuntimeError("a blocking upstream call from the upstream loop itself would wait for itself")
        future = asyncio.run_coroutine_threadsafe(coro_fn(), loop)
        try:
            return future.result(timeout + 5.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError("the upstream loop did not answer within the deadline") from None

    def take(self, key: tuple, headers: dict[str, str], pin: Pin | None) -> _Endpoint:
        """The kept endpoint for ``key``, made on first use; the caller ``release()``s it (loop
        thread only)."""
        endpoint = self.kept.pop(key, None)
        if endpoint is None:
            endpoint = _Endpoint(key, _http_client(headers, _KEPT_TIMEOUT_SECONDS, pin, httpx2.Limits(
                max_keepalive_connections=_IDLE_SESSIONS_MAX, keepalive_expiry=KEPT_IDLE_SECONDS)))
            while len(self.kept) >= KEPT_CLIENTS_MAX:
                self.kept.pop(next(iter(self.kept))).retire()
        self.kept[key] = endpoint
        endpoint.users += 1
        self._sweep_soon()
        return endpoint

    def drop(self, endpoint: _Endpoint) -> None:
        """After a failure on ``endpoint``: the next call opens a new connection and session
        (loop thread only). An endpoint made since by another call is left alone."""
        if self.kept.get(endpoint.key) is endpoint:
            del self.kept[endpoint.key]
        endpoint.retire()

    def _sweep_soon(self) -> None:
        loop = asyncio.get_running_loop()
        if self.sweep is not None and self.sweep.when() <= loop.time() + KEPT_IDLE_SECONDS:
            return  # one is due soon enough
        if self.sweep is not None:
            self.sweep.cancel()
        self.sweep = loop.call_later(KEPT_IDLE_SECONDS, self._expire)

    def _expire(self) -> None:
        self.sweep = None
        now = time.monotonic()
        for key, endpoint in list(self.kept.items()):
            endpoint.expire(now)
            if not endpoint.idle and endpoint.users == 0 and now - endpoint.last_used >= KEPT_IDLE_SECONDS:
                del self.kept[key]
                endpoint.retire()
        if self.kept:
            self._sweep_soon()

    def forget(self) -> None:
        """Close every kept endpoint (tests use it)."""
        with self.lock:
            loop = self.loop
        if loop is None or not self.kept:
            return

        async def retire_all():
            for endpoint in list(self.kept.values()):
                self.drop(endpoint)

        asyncio.run_coroutine_threadsafe(retire_all(), loop).result(10)


def _after_fork_in_child() -> None:
    global _PINS_LOCK
    _UPSTREAM.after_fork()
    _PINS_LOCK = threading.Lock()  # another thread of the parent may have held it at the fork


_UPSTREAM = _UpstreamLoop()
os.register_at_fork(after_in_child=_after_fork_in_child)


def _tool_dict(tool) -> dict:
    return tool.model_dump(by_alias=True, exclude_none=True, mode="json")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    out = [exc]
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc:
        out += _leaves(cause)
    return out


def _classify(exc: BaseException, state: dict) -> UpstreamFailure:
    """Turn whatever the SDK or the transport raised into one ``UpstreamFailure``."""
    leaves = _leaves(exc)
    phase = state["phase"]
    sent = phase == SEND
    for leaf in leaves:
        if isinstance(leaf, (TimeoutError, httpx2.TimeoutException)) and not isinstance(leaf, httpx2.ConnectTimeout):
            return UpstreamFailure("timeout", f"no answer within the deadline ({phase})", phase=phase, reached=sent)
        if isinstance(leaf, ResponseTooLarge):
            return UpstreamFailure("too_large", str(leaf), phase=phase, reached=sent)
        if isinstance(leaf, OffOrigin):
            return UpstreamFailure("off_origin", str(leaf), phase=phase, reached=False)
        if isinstance(leaf, (httpx2.ConnectError, httpx2.ConnectTimeout)):
            return UpstreamFailure("not_reached", f"{type(leaf).__name__} connecting to the upstream", phase=phase, reached=False)
        if isinstance(leaf, (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)):
            return UpstreamFailure("dropped", f"{type(leaf).__name__}: the connection ended without an answer",
                                   phase=phase, reached=sent)
        if isinstance(leaf, BadListing):
            return UpstreamFailure("bad_listing", str(leaf), phase=phase, reached=False)
        if isinstance(leaf, MCPError):
            return _error_answer(leaf.error, state)
    first = leaves[0]
    return UpstreamFailure("error", f"{type(first).__name__} in the upstream exchange ({phase})", phase=phase,
                           reached=sent, remote_message=str(first)[:200] or None)


def _error_answer(error: types.ErrorData, state: dict) -> UpstreamFailure:
    """A JSON-RPC error the session raised. After the call was written only the call's own answer
    counts: its HTTP status, and whether the upstream sent the error or the SDK made it up."""
    phase, code = state["phase"], error.code
    sent = phase == SEND
    answer = state.get("call_answer") if sent else None
    status = answer.status if answer is not None else (None if sent else state.get("http_status"))
    remote = error.message[:300] or None
    if status and status >= 400:
        return UpstreamFailure("http_error", f"the upstream answered HTTP {status}", phase=phase, reached=sent,
                               code=code, http_status=status, remote_message=remote)
    if sent and (answer is None or not answer.carried_error(code)):
        return UpstreamFailure("bad_answer", f"the upstream's answer to the call could not be used (JSON-RPC {code})",
                               phase=phase, reached=True, code=code, remote_message=remote)
    return UpstreamFailure("jsonrpc_error", f"the upstream answered with JSON-RPC error {code}", phase=phase,
                           reached=sent, code=code, remote_message=remote)


def _run(coro_fn, *, timeout: float, state: dict):
    try:
        return _run_classified(coro_fn, timeout=timeout, state=state)
    except (DefinitionDrift, UpstreamFailure) as exc:
        if isinstance(exc, UpstreamFailure) and exc.phase != SEND:
            _DISCOVERED.pop(state["endpoint_key"], None)
        if state.get("verified_key") is not None:  # nothing vouches for the pin until it is listed again
            _pin_unverified(state["verified_key"])
        raise


def _run_classified(coro_fn, *, timeout: float, state: dict):
    """Run ``coro_fn()`` on the upstream loop under one wall-clock deadline, as the exchange
    ``state`` (phase, status, cap); failures come back as ``UpstreamFailure``."""

    async def bounded():
        _EXCHANGE.set(state)
        try:
            with anyio.fail_after(timeout):
                return await coro_fn()
        except BaseException:
            if state.get("endpoint") is not None:
                _UPSTREAM.drop(state["endpoint"])
            raise

    try:
        return _UPSTREAM.run(bounded, timeout=timeout)
    except (DefinitionDrift, UpstreamFailure):
        raise
    except BaseException as exc:  # noqa: BLE001 - classified, never swallowed: re-raised as UpstreamFailure
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        drift = next((leaf for leaf in _leaves(exc) if isinstance(leaf, DefinitionDrift)), None)
        if drift is not None:
            raise drift from None
        raise _classify(exc, state) from exc


# Endpoint key (url, checked address, credential digest) → (protocol version, DiscoverResult) of
# the last modern session in this process: the next session to that endpoint adopts it instead of
# probing ``server/discover`` again (one round trip less per call); another credential or address
# may be shown another server and probes its own. Any failure before a call is written drops
# the entry, so an upgraded server is probed afresh.
_DISCOVERED: dict[tuple, tuple[str, Any]] = {}


def _client(url: str, http: httpx2.AsyncClient) -> Client:
    """A client for the exchange under way (``_EXCHANGE``: its endpoint key names what it adopts)."""
    transport = streamable_http_client(url, http_client=http)
    known = _DISCOVERED.get(_EXCHANGE.get()["endpoint_key"])
    if known is None:
        return Client(transport, cache=None)
    return Client(transport, cache=None, mode=known[0], prior_discover=known[1])


def _remember(client: Client) -> None:
    discovered, key = client.session.discover_result, _EXCHANGE.get()["endpoint_key"]
    if discovered is not None and key not in _DISCOVERED:
        _DISCOVERED[key] = (client.session.protocol_version, discovered)


# (url, checked address, credential digest, tool, pinned SHA-256) → when this process last listed
# the upstream and saw the tool's live definition match its pin (``time.monotonic``). Within
# ``recheck_seconds`` a call skips the listing: one round trip instead of two per call. Any
# failure drops the entry, and a check that began before that failure cannot put it back.
_VERIFIED: dict[tuple, float] = {}
_DROPPED: dict[tuple, float] = {}  # key → when a failure last dropped it
_PINS_LOCK = threading.Lock()
_PINS_KEPT = 1024  # past this many keys, those not seen for an hour are forgotten
_PINS_STALE_SECONDS = 3600.0


def _endpoint_key(url: str, pin: Pin | None, headers: dict[str, str]) -> tuple:
    """(url, checked address, credential digest): another address (the name resolved elsewhere)
    or another credential may be shown another listing and gets connections of its own. The
    pin check's key adds the tool and its pinned SHA-256."""
    return url, pin.address if pin is not None else "", hashlib.sha256(repr(sorted(headers.items())).encode()).hexdigest()


def _pin_verified(key: tuple, listed_at: float) -> None:
    with _PINS_LOCK:
        if _DROPPED.get(key, float("-inf")) >= listed_at:
            return  # a failure or drift seen since this listing began outranks it
        _VERIFIED[key] = listed_at
        if len(_VERIFIED) + len(_DROPPED) > _PINS_KEPT:
            horizon = time.monotonic() - _PINS_STALE_SECONDS
            for table in (_VERIFIED, _DROPPED):
                for old in [k for k, at in table.items() if at < horizon]:
                    del table[old]


def _pin_unverified(key: tuple) -> None:
    with _PINS_LOCK:
        _VERIFIED.pop(key, None)
        _DROPPED[key] = time.monotonic()


def forget_verified_pins() -> None:
    """Make the next call of every imported tool list its upstream again and open a new
    connection (tests use it)."""
    with _PINS_LOCK:
        _VERIFIED.clear()
        _DROPPED.clear()
    _UPSTREAM.forget()


LISTING_PAGES_MAX = 100  # pages of one tools/list: past them it fails, rather than answer with part of the list


async def _listing(client: Client) -> list[dict]:
    """Every page of ``tools/list``; all of them share the exchange's byte cap (``_CappedTransport``)."""
    tools, cursor, cursors = [], None, set()
    for _ in range(LISTING_PAGES_MAX):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        tools += [_tool_dict(t) for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return tools
        if cursor in cursors:
            raise BadListing(f"the upstream's tools/list gave a cursor again after {len(cursors) + 1} pages")
        cursors.add(cursor)
    raise BadListing(f"the upstream's tools/list did not end within {LISTING_PAGES_MAX} pages")


def list_tools(*, url: str, headers: dict[str, str], timeout: float, max_bytes: int, pin: Pin | None = None) -> list[dict]:
    """The upstream's ``tools/list`` (all pages, ``max_bytes`` for all of them) as wire-form dicts."""
    state = {"phase": CONNECT, "endpoint_key": _endpoint_key(url, pin, headers), "max_bytes": max_bytes}

    async def go():
        async with _http_client(headers, timeout, pin) as http, _client(url, http) as client:
            _remember(client)
            state["phase"] = LIST
            return await _listing(client)

    return _run(go, timeout=timeout, state=state)


def call_tool(
    *, url: str, headers: dict[str, str], name: str, arguments: Any, meta: dict, timeout: float, max_bytes: int,
    pinned_sha256: str | None = None, pin: Pin | None = None, recheck_seconds: float = 0.0,
    keep_connection: bool = False,
) -> CallResult:
    """List, check the live definition against ``pinned_sha256`` (``DefinitionDrift`` before
    anything is sent), then ``tools/call`` — all in one session under one deadline. With ``pin``
    (the egress check's answer) every request goes to that origin's checked address. The listing
    is skipped when this process saw the same definition match within ``recheck_seconds``
    (0: list before every call). ``keep_connection`` (reads only): reuse this process's recent
    connection and an idle session to the upstream; any failure closes them."""
    endpoint_key = _endpoint_key(url, pin, headers)
    key = (*endpoint_key, name, pinned_sha256) if pinned_sha256 is not None else None
    state = {"phase": CONNECT, "endpoint_key": endpoint_key, "verified_key": key, "max_bytes": max_bytes}
    verified_at = _VERIFIED.get(key) if key is not None else None
    check = key is not None and (verified_at is None or time.monotonic() - verified_at >= recheck_seconds)

    async def exchange(client: Client) -> CallResult:
        listed = None
        if check:
            state["phase"] = LIST
            listed_at = time.monotonic()
            listed = next((t for t in await _listing(client) if t.get("name") == name), None)
            state["phase"] = VERIFY
            # observed_sha256: "" for a definition RFC 8785 cannot pin, which is never the pin.
            if listed is None or observed_sha256(listed) != pinned_sha256:
                raise DefinitionDrift(listed)
            _pin_verified(key, listed_at)
        state["phase"] = SEND
        # The session's own tools/call, without the high-level client's output-schema check:
        # that compiles a validator per session (~15 ms here), and ToolOps treats the
        # result as untrusted data behind its own size cap either way.
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments, _meta=meta or None))
        result = await client.session.send_request(request, types.CallToolResult)
        return CallResult(
            is_error=bool(result.is_error), structured=result.structured_content,
            content=[b.model_dump(by_alias=True, exclude_none=True, mode="json") for b in result.content], listed=listed,
        )

    async def go():
        if not keep_connection:
            async with _http_client(headers, timeout, pin) as http, _client(url, http) as client:
                _remember(client)
                return await exchange(client)
        endpoint = state["endpoint"] = _UPSTREAM.take(endpoint_key, headers, pin)
        try:
            session = await endpoint.session(url, state)
            try:
                result = await session.call(exchange)
            except BaseException:
                session.close()  # and ``bounded`` drops the endpoint: nothing half-used is reused
                raise
        finally:
            endpoint.release()
        endpoint.give_back(session)
        return result

    return _run(go, timeout=timeout, state=state)
