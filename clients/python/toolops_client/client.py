"""``ToolOps`` (sync) and ``AsyncToolOps``: runs, tool calls, invocations and approvals.

Every operation is written once, as a generator of requests (``_transport``); the sync client runs it
to its answer, the async one awaits it. So ``AsyncRun.submit`` is ``Run.submit``, awaited.
"""
from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, TypeVar

import httpx2 as httpx

from toolops_client._transport import USER_AGENT, Op, Request, RetryPolicy, Sleep, adrive, drive
from toolops_client.errors import BudgetExhausted
from toolops_client.formats import TOOL_FORMATS, Api, ToolCall, tool_calls, tool_messages

# The states a call never leaves (ToolOps' TERMINAL; tests/client checks they agree).
FINAL_STATES = frozenset({"OBSERVED", "PARSE_REJECTED", "VALIDATION_REJECTED", "AUTHORIZATION_REJECTED",
                          "CANCELLED_BEFORE_COMMIT", "FAILED_BEFORE_COMMIT", "FAILED_AFTER_COMMIT"})
SERVER_WAIT = 30  # ?wait= on polls; ToolOps caps it (TOOLOPS_MAX_WAIT_SECONDS)
PERSON_POLL = 1.0  # seconds between looks while a person decides

Progress = Callable[[str], None]
Wait = bool | float | None


S = TypeVar("S", bound="_Owner")
P = ParamSpec("P")
R = TypeVar("R")
JSON = dict[str, Any]


def operation(gen_fn: Callable[Concatenate[S, P], Op[R]]) -> Callable[Concatenate[S, P], R]:
    """A public method from a request generator: its answer (sync client; the type checker's view) or
    an awaitable of it (async client: ``AsyncRun`` below spells those types out)."""

    @functools.wraps(gen_fn)
    def method(self, *args, **kwargs):
        return self._drive(gen_fn(self, *args, **kwargs))

    return method


@dataclass(frozen=True)
class CallOutcome:
    """What became of one tool call ``run.submit`` proposed."""

    proposal_id: str
    name: str
    invocation_id: str
    state: str
    waiting_for: Literal["approver", "support"] | None  # a person, when the call still waits for one
    error_code: str | None
    message: dict[str, Any]  # the recorded tool message (ToolOps' format of the model call)

    @property
    def denied(self) -> bool:
        return self.error_code == "confirmation_denied"


class ToolMessages(list):
    """The tool messages to append, in the model API's own shape; ``calls`` says what became of each."""

    def __init__(self, messages: list[dict[str, Any]], calls: list[CallOutcome]):
        super().__init__(messages)
        self.calls = calls


def waiting_for(record: dict[str, Any]) -> Literal["approver", "support"] | None:
    """Whom an invocation waits for (full record or compact answer), if anyone."""
    if record["state"] in FINAL_STATES:
        return None
    if record["state"] == "OUTCOME_UNKNOWN":
        return "support"
    confirmation = record.get("confirmation")
    if confirmation and confirmation.get("state", "pending") == "pending":
        return "approver"
    return None


@dataclass
class ModelCall:
    id: str
    format: str  # ToolOps' format: openai | anthropic
    api: Api
    name_map: dict[str, str]


class _Owner:
    _drive: Callable[[Op[Any]], Any]


class Invocation(_Owner):
    """One invocation's record (``data``), and what can be done with it."""

    def __init__(self, client: _Client, data: dict[str, Any]):
        self._client, self.data = client, data
        self._drive = client._drive

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def state(self) -> str:
        return self.data["state"]

    def _refresh(self, wait: float = 0) -> Op[Invocation]:
        self.data = yield Request("GET", f"invocations/{self.id}", params={"wait": wait} if wait else {}, replayable=True)
        return self

    def _events(self) -> Op[list[JSON]]:
        return (yield Request("GET", f"invocations/{self.id}/events", replayable=True))

    def _cancel(self, reason: str = "") -> Op[Invocation]:
        self.data = yield Request("POST", f"invocations/{self.id}/cancel", json={"reason": reason}, replayable=True)
        return self

    def _tool_message(self, format: str = "openai") -> Op[JSON]:  # noqa: A002 - the API's parameter name
        return (yield Request("GET", f"invocations/{self.id}/tool-message", params={"format": format}, replayable=True))

    refresh = operation(_refresh)
    events = operation(_events)
    cancel = operation(_cancel)
    tool_message = operation(_tool_message)


class Run(_Owner):
    """A ToolOps run: its budgets bound every model call and tool call made through it."""

    def __init__(self, client: _Client, data: dict[str, Any]):
        self._client, self.data = client, data
        self._drive = client._drive
        self.model_call: ModelCall | None = None

    @property
    def id(self) -> str:
        return self.data["id"]

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def _refresh(self) -> Op[JSON]:
        self.data = yield Request("GET", f"runs/{self.id}", replayable=True)
        return self.data

    def _finish(self) -> Op[JSON]:
        self.data = yield Request("POST", f"runs/{self.id}/finish", replayable=True)
        return self.data

    def _tools(self, format: str = "openai", only: list[str] | None = None) -> Op[list[JSON]]:  # noqa: A002
        """Open the next model call: the tool definitions to hand the model, in ``format``."""
        if format not in TOOL_FORMATS:
            raise ValueError(f"format must be one of {', '.join(TOOL_FORMATS)}")
        fmt, api = TOOL_FORMATS[format]
        body: dict[str, Any] = {"format": fmt} if only is None else {"format": fmt, "tools": only}
        call = yield Request("POST", f"runs/{self.id}/model-calls", json=body)
        self.model_call = ModelCall(call["id"], fmt, api, call["name_map"])
        if api == "responses":  # the Responses API takes the function's members flat
            return [{"type": "function", **t["function"]} for t in call["tools"]]
        return call["tools"]

    def _submit(self, response: Any, *, wait: Wait = None, progress: Progress | None = None) -> Op[ToolMessages]:
        """Propose every tool call of ``response``; the tool messages to append, in its API's shape.

        A call waiting for a person answers its pending message at once; with ``wait`` (seconds, or
        True: as long as it takes) this blocks until the person decides, telling ``progress``."""
        api, calls = tool_calls(response)
        model_call = self.model_call
        if model_call is None:
            raise ValueError("open a model call first: run.tools(format=…) gives the definitions to hand the model")
        if (api == "anthropic") != (model_call.format == "anthropic"):
            raise ValueError(f"a {api} response needs run.tools(format="
                             f"{'anthropic' if api == 'anthropic' else 'openai'!r}) before the model call")
        # All proposed first, so they run side by side; then each followed to its message.
        entries = []
        for call in calls:
            entry = yield from self._client._propose(model_call, call)
            entries.append(entry)
        outcomes = []
        for call, entry in zip(calls, entries):
            outcome = yield from _follow(entry, call, model_call.format, wait=wait, progress=progress)
            outcomes.append(outcome)
        return ToolMessages(tool_messages(api, [o.message for o in outcomes]), outcomes)

    refresh = operation(_refresh)
    finish = operation(_finish)
    tools = operation(_tools)
    submit = operation(_submit)


class Confirmations(_Owner):
    """The Approvals API, for people (a personal token): what you may decide, and deciding it."""

    def __init__(self, client: _Client):
        self._client = client
        self._drive = client._drive

    def _pending(self, state: str = "pending") -> Op[list[JSON]]:
        """Every confirmation in ``state`` you may see, all pages, oldest first."""
        found, page = [], 1
        while True:
            body = yield Request("GET", "confirmations", params={"state": state, "page": page}, replayable=True)
            found.extend(body["results"])
            if not body.get("next"):
                return found
            page += 1

    def _get(self, confirmation_id: str) -> Op[JSON]:
        return (yield Request("GET", f"confirmations/{confirmation_id}", replayable=True))

    def _approve(self, confirmation_id: str, *, digest: str) -> Op[JSON]:
        """Approve exactly what you saw: ``digest`` from the confirmation (another one → DigestMismatch)."""
        return (yield Request("POST", f"confirmations/{confirmation_id}/approve", json={"digest": digest}))

    def _deny(self, confirmation_id: str, *, reason: str) -> Op[JSON]:
        """Deny; the model reads ``reason`` word for word."""
        return (yield Request("POST", f"confirmations/{confirmation_id}/deny", json={"reason": reason}))

    pending = operation(_pending)
    get = operation(_get)
    approve = operation(_approve)
    deny = operation(_deny)


class _Client(_Owner):
    def __init__(self, url: str, token: str, *, timeout: float = 60.0, max_retries: int = 4,
                 retry: RetryPolicy | None = None, http: Any = None):
        base = url.rstrip("/")
        base = base if base.endswith("/api/v1") else base + "/api/v1"
        self.url = base
        self._policy = retry or RetryPolicy(max_retries=max_retries)
        self._http = http or self._http_class(
            base_url=base + "/", timeout=timeout,
            headers={"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT, "Accept": "application/json"},
        )
        self.confirmations = Confirmations(self)

    _http_class: type = httpx.Client

    def _create_run(self, budgets: dict[str, Any] | None, timezone: str, locale: str | None,
                    metadata: dict[str, Any] | None, on_behalf_of: str | None) -> Op[Run]:
        body: dict[str, Any] = {"timezone": timezone, "budgets": budgets or {}, "metadata": metadata or {}}
        if locale:
            body["locale"] = locale
        if on_behalf_of:
            body["on_behalf_of"] = on_behalf_of
        return Run(self, (yield Request("POST", "runs", json=body)))

    def _get_run(self, run_id: str) -> Op[Run]:
        """A run started earlier (its state, budgets used and left)."""
        return Run(self, (yield Request("GET", f"runs/{run_id}", replayable=True)))

    def _invocation(self, invocation_id: str) -> Op[Invocation]:
        return Invocation(self, (yield Request("GET", f"invocations/{invocation_id}", replayable=True)))

    def _propose(self, model_call: ModelCall, call: ToolCall) -> Op[JSON]:
        """One tool call, posted with its own Idempotency-Key (the same on every retry): its compact answer."""
        answer = yield Request(
            "POST", f"model-calls/{model_call.id}/proposals", json=call.body,
            headers={"Idempotency-Key": f"toolops-client-{uuid.uuid4().hex}", "Prefer": "return=minimal"},
            replayable=True,
        )
        entry = answer["invocations"][0] if "invocations" in answer else answer
        if entry.get("kind") == "refusal":  # a run budget refused it (Anthropic content answers as a batch)
            raise BudgetExhausted({**entry["error"], **entry["error"].get("detail", {})}, 429)
        return entry

    invocation = operation(_invocation)
    get_run = operation(_get_run)


def _say(progress: Progress | None, call: ToolCall, record: dict[str, Any]) -> None:
    if progress is None:
        return
    who = waiting_for(record)
    if who == "approver":
        confirmation = record.get("confirmation") or {}
        status = f"waits for an approver (confirmation {confirmation.get('id')}, until {confirmation.get('expires_at')})"
    elif who == "support":
        status = "outcome unknown: waits for a support person to resolve it"
    elif record["state"] in FINAL_STATES:
        error = record.get("error") or {}
        status = f"{record['state']}" + (f" — {error.get('code')}: {error.get('message')}" if error else "")
    else:
        status = f"{record['state']}, running"
    progress(f"{call.name} ({call.proposal_id}) → invocation {record['id']}: {status}")


def _follow(entry: dict[str, Any], call: ToolCall, fmt: str, *, wait: Wait, progress: Progress | None) -> Op[CallOutcome]:
    """A proposed call, followed until it has a message for the model — and, with ``wait``, until the
    person it waits for decided it."""
    record, message = entry, entry.get("tool_message")
    deadline = None if wait is True else time.monotonic() + float(wait or 0)
    if record["state"] in FINAL_STATES or waiting_for(record):  # a call that just runs is told once, when done
        _say(progress, call, record)
    while True:
        person = waiting_for(record)
        out_of_time = not wait or (deadline is not None and time.monotonic() >= deadline)
        if message is not None and (person is None or out_of_time):
            error = record.get("error") or {}
            return CallOutcome(call.proposal_id, call.name, record["id"], record["state"], person, error.get("code"), message)
        if person is not None:
            yield Sleep(PERSON_POLL)  # ToolOps answers a poll at once while a person decides
        seen = (record["state"], person)
        record = yield Request("GET", f"invocations/{record['id']}", params={"wait": SERVER_WAIT}, replayable=True)
        if (record["state"], waiting_for(record)) != seen and (
                record["state"] in FINAL_STATES or waiting_for(record) or seen[1] is not None):
            _say(progress, call, record)  # done, waiting for someone, or just decided
        if record["state"] in FINAL_STATES or waiting_for(record):
            message = yield Request("GET", f"invocations/{record['id']}/tool-message", params={"format": fmt},
                                    replayable=True)
        else:
            message = None  # running again (approved): the interim message no longer holds


class ToolOps(_Client):
    """The synchronous client: ``ToolOps(url, token)``."""

    _http_class = httpx.Client

    def _drive(self, op: Op[R]) -> R:
        return drive(op, self._http, self._policy)

    def run(self, *, budgets: dict[str, Any] | None = None, timezone: str = "UTC", locale: str | None = None,
            metadata: dict[str, Any] | None = None, on_behalf_of: str | None = None) -> Run:
        """Start a run (use it as a context manager: leaving it finishes the run)."""
        return self._drive(self._create_run(budgets, timezone, locale, metadata, on_behalf_of))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ToolOps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AsyncRunStart:
    """``await client.run(…)`` or ``async with client.run(…) as run``."""

    def __init__(self, client: AsyncToolOps, op: Op[Run]):
        self._client, self._op = client, op
        self._run: AsyncRun | None = None

    def __await__(self) -> Generator[Any, None, AsyncRun]:
        return self._client._drive(self._op).__await__()

    async def __aenter__(self) -> AsyncRun:
        self._run = run = await self
        return run

    async def __aexit__(self, *exc: object) -> None:
        if self._run is not None:
            await self._run.finish()


class AsyncToolOps(_Client):
    """The asynchronous client: the same operations, awaited."""

    _http_class = httpx.AsyncClient

    def _drive(self, op: Op[R]) -> Any:
        return adrive(op, self._http, self._policy)

    def run(self, *, budgets: dict[str, Any] | None = None, timezone: str = "UTC", locale: str | None = None,
            metadata: dict[str, Any] | None = None, on_behalf_of: str | None = None) -> _AsyncRunStart:
        return _AsyncRunStart(self, self._create_run(budgets, timezone, locale, metadata, on_behalf_of))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncToolOps:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


if TYPE_CHECKING:  # what a type checker sees of the async client's run: the same methods, awaited
    class AsyncRun(_Owner):
        data: JSON
        model_call: ModelCall | None

        @property
        def id(self) -> str: ...
        def _tools(self, format: str = "openai", only: list[str] | None = None) -> Op[list[JSON]]: ...  # noqa: A002
        def _submit(self, response: Any, *, wait: Wait = None, progress: Progress | None = None) -> Op[ToolMessages]: ...
        async def tools(self, format: str = "openai", only: list[str] | None = None) -> list[JSON]: ...  # noqa: A002
        async def submit(self, response: Any, *, wait: Wait = None, progress: Progress | None = None) -> ToolMessages: ...
        async def refresh(self) -> JSON: ...
        async def finish(self) -> JSON: ...
else:
    AsyncRun = Run
