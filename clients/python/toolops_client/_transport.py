"""Requests and their retries, for the sync and the async client alike.

The client's operations are written once, as generators that yield what they need (``Request``,
``Sleep``, ``Invoke``) and receive the answer (``drive`` / ``adrive`` run them). Retries live here:
429 and 503 are sent again after ``Retry-After`` (or a backoff) with the *same* headers — the same
``Idempotency-Key`` — and a connection that broke after the request went out is retried only for a
request marked ``replayable`` (reads, and proposals, which ToolOps answers once per key). A
``budget_exhausted`` 429 is the run's answer, not a rate limit: it is never retried.
"""
from __future__ import annotations

import email.utils
import inspect
import random
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx2 as httpx

from toolops_client.errors import ConnectionFailed, error_for

USER_AGENT = "toolops-client-python/0.1.0"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    json: Any = None
    content: bytes | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    replayable: bool = False


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Invoke:
    """Call user code (the model): awaited by the async driver when it answers an awaitable."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]


T = TypeVar("T")
# An operation: yields what it needs, is sent the answers, returns a T (``Op[Run]``, ``Op[dict[str, Any]]``).
Op = Generator["Request | Sleep | Invoke", Any, T]


@dataclass
class RetryPolicy:
    max_retries: int = 4
    backoff: float = 0.5  # first delay without Retry-After; doubles, with jitter
    max_delay: float = 60.0  # a longer Retry-After is waited this long at most

    def after_answer(self, attempt: int, response: httpx.Response, problem: dict[str, Any]) -> float | None:
        """Seconds to wait before sending again, or None: the answer stands."""
        if attempt >= self.max_retries:
            return None
        if response.status_code == 503 or (response.status_code == 429 and problem.get("code") != "budget_exhausted"):
            return self._retry_after(response.headers.get("Retry-After")) or self._backoff(attempt)
        return None

    def after_failure(self, attempt: int, exc: httpx.TransportError, request: Request) -> float | None:
        """Seconds to wait before sending again after a transport error, or None: give up."""
        if attempt >= self.max_retries:
            return None
        # Nothing reached the server: always safe. Otherwise only a request ToolOps answers once.
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)) or request.replayable:
            return self._backoff(attempt)
        return None

    def _backoff(self, attempt: int) -> float:
        return min(self.max_delay, self.backoff * 2**attempt * (0.5 + random.random() / 2))

    def _retry_after(self, value: str | None) -> float | None:
        if not value:
            return None
        if value.strip().isdigit():
            return min(self.max_delay, float(value))
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            return None
        return min(self.max_delay, max(0.0, when - time.time()))


def _build(client: httpx.Client | httpx.AsyncClient, request: Request) -> httpx.Request:
    return client.build_request(request.method, request.path, json=request.json, content=request.content,
                                params=request.params or None, headers=request.headers or None)


def _settle(policy: RetryPolicy, attempt: int, response: httpx.Response) -> tuple[float | None, Any]:
    """``(delay, None)`` to retry, or ``(None, body)`` — or raises the problem as its exception."""
    if response.status_code < 400:
        return None, response.json() if response.content else None
    try:
        problem = response.json()
    except ValueError:
        problem = {"code": "error", "detail": response.text[:500]}
    problem = problem if isinstance(problem, dict) else {"detail": problem}
    delay = policy.after_answer(attempt, response, problem)
    if delay is not None:
        return delay, None
    raise error_for(response.status_code, problem, dict(response.headers))


def send(client: httpx.Client, policy: RetryPolicy, request: Request) -> Any:
    attempt = 0
    while True:
        try:
            response = client.send(_build(client, request))
        except httpx.TransportError as exc:
            delay = policy.after_failure(attempt, exc, request)
            if delay is None:
                raise ConnectionFailed(f"{request.method} {request.path}: {exc!r}") from exc
        else:
            delay, body = _settle(policy, attempt, response)
            if delay is None:
                return body
        time.sleep(delay)
        attempt += 1


async def asend(client: httpx.AsyncClient, policy: RetryPolicy, request: Request) -> Any:
    attempt = 0
    while True:
        try:
            response = await client.send(_build(client, request))
        except httpx.TransportError as exc:
            delay = policy.after_failure(attempt, exc, request)
            if delay is None:
                raise ConnectionFailed(f"{request.method} {request.path}: {exc!r}") from exc
        else:
            delay, body = _settle(policy, attempt, response)
            if delay is None:
                return body
        await anyio.sleep(delay)
        attempt += 1


def drive(op: Op[T], client: httpx.Client, policy: RetryPolicy) -> T:
    """Run an operation to its answer, synchronously; an error is thrown into it where it asked."""
    answer: Any = None
    error: Exception | None = None
    try:
        while True:
            step = op.throw(error) if error is not None else op.send(answer)
            answer, error = None, None
            try:
                if isinstance(step, Request):
                    answer = send(client, policy, step)
                elif isinstance(step, Sleep):
                    time.sleep(step.seconds)
                else:
                    answer = step.fn(**step.kwargs)
            except Exception as exc:  # noqa: BLE001 - handed to the operation, which may handle it
                error = exc
    except StopIteration as done:
        return done.value


async def adrive(op: Op[T], client: httpx.AsyncClient, policy: RetryPolicy) -> T:
    """Run an operation to its answer on the event loop (the model may be a coroutine function)."""
    answer: Any = None
    error: Exception | None = None
    try:
        while True:
            step = op.throw(error) if error is not None else op.send(answer)
            answer, error = None, None
            try:
                if isinstance(step, Request):
                    answer = await asend(client, policy, step)
                elif isinstance(step, Sleep):
                    await anyio.sleep(step.seconds)
                else:
                    answer = step.fn(**step.kwargs)
                    if inspect.isawaitable(answer):
                        answer = await answer
            except Exception as exc:  # noqa: BLE001 - handed to the operation, which may handle it
                error = exc
    except StopIteration as done:
        return done.value
