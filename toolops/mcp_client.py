"""Talking to an upstream MCP server with the official SDK ``Client``, from synchronous code.

Celery workers and management commands are synchronous; each call here runs the async client
with ``anyio.run`` inside one wall-clock deadline (``anyio.fail_after``) and reads every
response through a byte cap (a wrapping httpx transport), so a slow or huge answer cannot hold
a worker. No Django here: callers pass the URL, the headers (credentials resolved by them) and
the limits.

What a failure means is decided by *when* it happened, because that is what the commit boundary
depends on: anything before the ``tools/call`` request was written (connect, version probe,
the pin check) provably did not reach the tool; a failure after it may have.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
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

from toolops.runtime.mcp_definitions import definition_sha256

# Phases of one exchange, in order: a failure in the first three never reached the tool.
CONNECT, LIST, VERIFY, SEND = "connect", "list", "verify", "send"


class ResponseTooLarge(Exception):
    """The upstream's response went past the cap; the rest was not read."""


class OffOrigin(Exception):
    """The client tried to send somewhere other than the checked upstream origin."""


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
    """One exchange failed. ``reached``: the ``tools/call`` may have been processed."""

    def __init__(self, kind: str, message: str, *, phase: str, reached: bool, code: int | None = None,
                 http_status: int | None = None):
        super().__init__(message)
        self.kind, self.phase, self.reached, self.code, self.http_status = kind, phase, reached, code, http_status


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


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner, limit: int):
        self.inner, self.limit, self.seen = inner, limit, 0

    async def __aiter__(self):
        async for chunk in self.inner:
            self.seen += len(chunk)
            if self.seen > self.limit:
                raise ResponseTooLarge(f"response larger than {self.limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CappedTransport(httpx2.AsyncBaseTransport):
    """Streams each response body through a byte counter that stops at ``limit``, notes the
    last HTTP status (the SDK folds a non-2xx answer into a generic JSON-RPC error) and, with a
    ``pin``, sends only to the pinned origin, connecting to its checked address."""

    def __init__(self, limit: int, state: dict, pin: Pin | None = None):
        self.inner, self.limit, self.state = httpx2.AsyncHTTPTransport(verify=_ssl_context()), limit, state
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
        if self.pin is not None:
            request = self._pinned(request)
        response = await self.inner.handle_async_request(request)
        self.state["http_status"] = response.status_code
        response.stream = _CappedStream(response.stream, self.limit)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~35 ms; one context per process serves every session.
    return ssl.create_default_context()


def _http_client(headers: dict[str, str], timeout: float, max_bytes: int, state: dict,
                 pin: Pin | None = None) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        headers=headers, transport=_CappedTransport(max_bytes, state, pin), follow_redirects=False,
        timeout=httpx2.Timeout(timeout),
    )


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


def _classify(exc: BaseException, phase: str, http_status: int | None) -> UpstreamFailure:
    """Turn whatever the SDK or the transport raised into one ``UpstreamFailure``."""
    leaves = _leaves(exc)
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
        if isinstance(leaf, MCPError):
            status = http_status if http_status and http_status >= 400 else None
            kind = "http_error" if status else "jsonrpc_error"
            return UpstreamFailure(kind, leaf.error.message[:300] + (f" (HTTP {status})" if status else ""), phase=phase,
                                   reached=sent, code=leaf.error.code, http_status=status)
    first = leaves[0]
    return UpstreamFailure("error", f"{type(first).__name__}: {str(first)[:200]}", phase=phase, reached=sent)


def _run(coro_fn, *, timeout: float, state: dict):
    try:
        return _run_classified(coro_fn, timeout=timeout, state=state)
    except (DefinitionDrift, UpstreamFailure) as exc:
        if isinstance(exc, UpstreamFailure) and exc.phase != SEND:
            _DISCOVERED.pop(state["url"], None)
        if state.get("verified_key") is not None:  # nothing vouches for the pin until it is listed again
            _pin_unverified(state["verified_key"])
        raise


def _run_blocking(fn):
    """``anyio.run(fn)``; from a thread whose event loop is running (an ASGI process, a test
    driving a browser), in a helper thread, since a second loop cannot run in the same thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, fn).result()


def _run_classified(coro_fn, *, timeout: float, state: dict):
    """Run ``coro_fn()`` under one wall-clock deadline; failures come back as ``UpstreamFailure``."""

    async def bounded():
        with anyio.fail_after(timeout):
            return await coro_fn()

    try:
        return _run_blocking(bounded)
    except (DefinitionDrift, UpstreamFailure):
        raise
    except BaseException as exc:  # noqa: BLE001 - classified, never swallowed: re-raised as UpstreamFailure
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        drift = next((leaf for leaf in _leaves(exc) if isinstance(leaf, DefinitionDrift)), None)
        if drift is not None:
            raise drift from None
        raise _classify(exc, state["phase"], state.get("http_status")) from exc


# url → (protocol version, DiscoverResult) of the last modern session in this process: the next
# session adopts it instead of probing ``server/discover`` again (one round trip less per call).
# Any failure before a call is written drops the entry, so an upgraded server is probed afresh.
_DISCOVERED: dict[str, tuple[str, Any]] = {}


def _client(url: str, http: httpx2.AsyncClient) -> Client:
    transport = streamable_http_client(url, http_client=http)
    known = _DISCOVERED.get(url)
    if known is None:
        return Client(transport, cache=None)
    return Client(transport, cache=None, mode=known[0], prior_discover=known[1])


def _remember(url: str, client: Client) -> None:
    discovered = client.session.discover_result
    if discovered is not None and url not in _DISCOVERED:
        _DISCOVERED[url] = (client.session.protocol_version, discovered)


# (url, checked address, tool, pinned SHA-256, credential digest) → when this process last listed
# the upstream and saw the tool's live definition match its pin (``time.monotonic``). Within
# ``recheck_seconds`` a call skips the listing: one round trip instead of two per call. Any
# failure drops the entry, and a check that began before that failure cannot put it back.
_VERIFIED: dict[tuple, float] = {}
_DROPPED: dict[tuple, float] = {}  # key → when a failure last dropped it
_PINS_LOCK = threading.Lock()
_PINS_KEPT = 1024  # past this many keys, those not seen for an hour are forgotten
_PINS_STALE_SECONDS = 3600.0


def _verified_key(url: str, pin: Pin | None, name: str, pinned_sha256: str, headers: dict[str, str]) -> tuple:
    # Another address (the name resolved elsewhere) or another credential may be shown another
    # listing: its check is its own.
    credential = hashlib.sha256(repr(sorted(headers.items())).encode()).hexdigest()
    return url, pin.address if pin is not None else "", name, pinned_sha256, credential


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
    """Make the next call of every imported tool list its upstream again (tests use it)."""
    with _PINS_LOCK:
        _VERIFIED.clear()
        _DROPPED.clear()


async def _listing(client: Client) -> list[dict]:
    tools, cursor = [], None
    for _ in range(100):  # a paginator that never ends cannot hang us past the deadline anyway
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        tools += [_tool_dict(t) for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def list_tools(*, url: str, headers: dict[str, str], timeout: float, max_bytes: int, pin: Pin | None = None) -> list[dict]:
    """The upstream's ``tools/list`` (all pages) as wire-form dicts."""
    state = {"phase": CONNECT, "url": url}

    async def go():
        async with _http_client(headers, timeout, max_bytes, state, pin) as http, _client(url, http) as client:
            _remember(url, client)
            state["phase"] = LIST
            return await _listing(client)

    return _run(go, timeout=timeout, state=state)


def call_tool(
    *, url: str, headers: dict[str, str], name: str, arguments: Any, meta: dict, timeout: float, max_bytes: int,
    pinned_sha256: str | None = None, pin: Pin | None = None, recheck_seconds: float = 0.0,
) -> CallResult:
    """List, check the live definition against ``pinned_sha256`` (``DefinitionDrift`` before
    anything is sent), then ``tools/call`` — all in one session under one deadline. With ``pin``
    (the egress check's answer) every request goes to that origin's checked address. The listing
    is skipped when this process saw the same definition match within ``recheck_seconds``
    (0: list before every call)."""
    key = _verified_key(url, pin, name, pinned_sha256, headers) if pinned_sha256 is not None else None
    state = {"phase": CONNECT, "url": url, "verified_key": key}
    verified_at = _VERIFIED.get(key) if key is not None else None
    check = key is not None and (verified_at is None or time.monotonic() - verified_at >= recheck_seconds)

    async def go():
        async with _http_client(headers, timeout, max_bytes, state, pin) as http, _client(url, http) as client:
            _remember(url, client)
            listed = None
            if check:
                state["phase"] = LIST
                listed_at = time.monotonic()
                listed = next((t for t in await _listing(client) if t.get("name") == name), None)
                state["phase"] = VERIFY
                if listed is None or definition_sha256(listed) != pinned_sha256:
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

    return _run(go, timeout=timeout, state=state)
