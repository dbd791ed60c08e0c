"""tools/list and tools/call on the domain services (synchronous: run via ``db.in_db_thread``).

tools/list records a ModelCall (format ``mcp``) with the exact visible set it answers, so a
later tools/call is resolved against the run's most recent ModelCall and docs/concepts/lifecycle.md invariant 2
holds for MCP clients as for REST ones. tools/call hands the exact bytes of ``arguments`` to
``proposal_admit``; what comes back to the client is the recorded MCP tool message.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime
from collections.abc import Mapping
from typing import Any, Callable, Iterator

import mcp_types as types
from django.conf import settings
from django.utils import timezone
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PARAM_HEADER_PREFIX, validate_mcp_param_headers
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from specs_app.models import Subject
from specs_app.selectors import toolspecs_granted_to_subject
from toolops.sql import field_max_length, state_message_and_pending_expiry
from toolops.errors import ApplicationError, Conflict, NotFound
from toolops.runtime.states import TERMINAL, State
from toolops.runtime.storable import storable_text, text_problem
from toolops.runtime.tracecontext import TraceContext, parse_traceparent

from worker.attempt import run_claimed_at_admission
from worker.claim import claim_with_admission
from invocations_app.models import Confirmation, Invocation, ModelCall, ModelCallTool, Proposal, Run, ToolMessage
from invocations_app.tool_messages import tool_message
from invocations_app.admission import proposal_admit
from invocations_app.runs import model_call_create
from mcp_server.runs import mcp_run_and_listing, mcp_run_get_or_open, run_rule

logger = logging.getLogger(__name__)

# The built-in status tool. Its name is one every model API accepts (OpenAI, Anthropic and Gemini
# function names: letters, digits, "_" and "-"); it can never be a ToolSpec's model-facing name,
# which always ends in "_v<version>".
STATUS_TOOL = "toolops_invocation_status"
# Its name until issue 33: a dot, which OpenAI refuses in a function name (and the OpenAI Agents
# SDK passes MCP names through). Still answered for one release, never listed.
LEGACY_STATUS_TOOL = "toolops.invocation_status"
STATUS_TOOL_NAMES = frozenset({STATUS_TOOL, LEGACY_STATUS_TOOL})
IDEMPOTENCY_META_KEY = "dev.toolops/idempotencyKey"
# Same rule as the REST API's Idempotency-Key header: 1–255 visible ASCII characters.
_KEY_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F))
# The longest name a call may give: what the proposal's record holds (the REST API's limit too).
NAME_MAX_CHARS = field_max_length(Proposal, "name")
# What a record keeps of the client's own labels: its JSON-RPC request id, its tracestate.
_REQUEST_ID_CHARS, _TRACESTATE_CHARS = 200, 512
_PARAM_HEADER_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()

STATUS_TOOL_DEFINITION: dict[str, Any] = {
    "name": STATUS_TOOL,
    "title": "ToolOps: state of a call",
    "description": (
        "The state of an earlier tool call by its invocation id (from a pending_confirmation "
        "answer). When the call is final, returns its result exactly as the call itself would have."
    ),
    "inputSchema": {
        "type": "object",
        "properties": {"invocation_id": {"type": "string", "format": "uuid"}},
        "required": ["invocation_id"],
        "additionalProperties": False,
    },
    "annotations": {"title": "ToolOps: state of a call", "readOnlyHint": True, "destructiveHint": False,
                    "idempotentHint": True, "openWorldHint": False},
}


@dataclass(frozen=True)
class McpRequest:
    """What one MCP request tells the front door, beyond its params."""

    subject: Subject
    session_id: str | None
    request_id: str | int | None
    protocol_version: str
    meta: dict
    oauth_client: dict | None = None  # the OAuth client the request came through (None: an API token)

    @property
    def trace(self) -> TraceContext | None:
        return parse_traceparent(_text(self.meta.get("traceparent")), _text(self.meta.get("tracestate")))

    def run(self) -> Run:
        return mcp_run_get_or_open(subject=self.subject, rule=run_rule(session_id=self.session_id, meta=self.meta),
                                   trace=self.trace)

    def origin(self) -> dict:
        rule = run_rule(session_id=self.session_id, meta=self.meta)
        origin = {"transport": "mcp", "protocol_version": self.protocol_version, "session_id": self.session_id,
                  "request_id": _recorded_id(self.request_id), "run_rule": rule.kind}
        if self.oauth_client is not None:
            # The client names itself (registration or metadata document): kept as a record can hold it.
            origin["oauth_client"] = {key: storable_text(str(value), max_chars=_REQUEST_ID_CHARS)
                                      for key, value in self.oauth_client.items()}
        tracestate = _text(self.meta.get("tracestate"))
        if tracestate:
            origin["tracestate"] = storable_text(tracestate, max_chars=_TRACESTATE_CHARS)
        return origin


@dataclass(frozen=True)
class CallOutcome:
    """Either the answer now (a ``CallToolResult`` as a dict) or the invocation to wait for."""

    result: dict | None = None
    wait_for: uuid.UUID | None = None
    invocation_id: uuid.UUID | None = None  # the call's record, when the proposal made one


# --- tools/list -------------------------------------------------------------------------------

def mcp_tools_list(*, request: McpRequest) -> list[dict]:
    """The subject's tools, recorded as a ModelCall of its run, plus the built-in status tool."""
    run = request.run()
    model_call = _record_listing(run, request.subject)
    return [row.rendered for row in model_call.visible_tools.all()] + [STATUS_TOOL_DEFINITION]


def _record_listing(run: Run, subject: Subject) -> ModelCall:
    refs = [spec.ref for spec in toolspecs_granted_to_subject(subject=subject)]
    try:
        return model_call_create(run=run, tool_refs=refs, fmt="mcp", context=[])
    except ApplicationError as exc:
        raise _protocol_error(exc) from None


# --- tools/call -------------------------------------------------------------------------------

def mcp_tool_call(*, request: McpRequest, name: str, arguments_bytes: bytes, arguments: Any = None,
                  headers: Mapping[str, str] | None = None, arm: Callable[[uuid.UUID], None] | None = None) -> CallOutcome:
    """Admit one call; answer at once when it is decided without executing, else say what to wait for.

    ``arguments`` (as the SDK parsed them) and the HTTP ``headers`` are for the 2026-07-28
    ``Mcp-Param-*`` header check (``_check_param_headers``). ``arm(invocation_id)``, when given,
    is called once the call is admitted and before its row is read for the answer, so a
    handler that must wait is woken by any change after that read (``wakeups.py``) without
    reading the row a second time first."""
    _require_proposable_name(name)
    run, model_call = mcp_run_and_listing(subject=request.subject, rule=run_rule(session_id=request.session_id, meta=request.meta),
                                          trace=request.trace)
    if model_call is None:
        # Called without listing first in this run (e.g. a client that cached yesterday's
        # listing): record the listing it would have got, so the call is still resolved
        # against a recorded visible set.
        model_call = _record_listing(run, request.subject)
    _check_param_headers(request, model_call, name, arguments, headers)
    now = timezone.now()
    with _inline_slot() as inline:
        try:
            invocation, created = proposal_admit(
                model_call=model_call, subject=request.subject, proposal_id=_proposal_id(request), name=name,
                arguments_bytes=arguments_bytes, idempotency_key=_idempotency_key(request, run), trace=request.trace,
                now=now, origin=request.origin(), claim_inline=claim_with_admission if inline else None,
                proposal_id_is_new=True,
            )
        except Conflict as exc:
            if exc.code != "idempotency_key_in_use":
                return CallOutcome(result=_error_result(exc))
            # A re-issue while the first call with this key is running or awaiting a person:
            # attach to that invocation and answer as it would.
            invocation, created = Invocation.objects.get(pk=exc.extra["invocation_id"]), False
        except ApplicationError as exc:
            return CallOutcome(result=_error_result(exc))
        if invocation.error_code == "unknown_tool":
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {name!r}: not in this run's tool listing",
                           data={"code": "unknown_tool", "invocation_id": str(invocation.pk)})
        if inline and created and invocation.state == State.EXECUTING:
            answer = _run_inline(invocation)
            if answer is not None:
                return CallOutcome(result=answer, invocation_id=invocation.pk)
    if arm is not None:
        arm(invocation.pk)
    answer = mcp_call_poll(subject=request.subject, invocation_id=invocation.pk)
    if answer is not None:
        return CallOutcome(result=answer, invocation_id=invocation.pk)
    return CallOutcome(wait_for=invocation.pk, invocation_id=invocation.pk)


def _require_proposable_name(name: str) -> None:
    """A name no tool has and no record can hold — a NUL, a lone surrogate, too long — is a
    malformed request (the REST API's 400), refused before it is looked up or recorded."""
    problem = f"more than {NAME_MAX_CHARS} characters" if len(name) > NAME_MAX_CHARS else text_problem(name)
    if problem is not None:
        raise MCPError(types.INVALID_PARAMS, f"params.name is no tool's name ({problem})",
                       data={"code": "malformed_request", "field": "name"})


class _InlineSlots:
    """How many reads this process executes inline at once (``TOOLOPS_MCP_INLINE_READS``): a
    slow remote must not hold every database thread of the MCP process. A call that finds no
    free slot goes to the workers, as with inline reads off."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy = 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[bool]:
        with self.lock:
            taken = settings.TOOLOPS_MCP_INLINE_READS and self.busy < settings.TOOLOPS_MCP_INLINE_MAX
            if taken:
                self.busy += 1
        try:
            yield taken
        finally:
            if taken:
                with self.lock:
                    self.busy -= 1


_inline_slot = _InlineSlots()


def _check_param_headers(request: McpRequest, model_call: ModelCall, name: str, arguments: Any,
                         headers: Mapping[str, str] | None) -> None:
    """The SDK's 2026-07-28 rule for ``Mcp-Param-*`` headers (each property of the tool's
    inputSchema annotated ``x-mcp-header`` is mirrored in its header, equal to the argument),
    checked against the tool as this run's recorded listing shows it; a mismatch is the SDK's
    own ``HEADER_MISMATCH`` error, before anything is admitted or recorded. A tool not in the
    listing is left to admission (``unknown_tool``), as the SDK leaves it to dispatch."""
    if headers is None or request.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return
    if arguments is not None and not isinstance(arguments, Mapping):
        return
    arguments = arguments or {}
    if not arguments and not any(key.lower().startswith(_PARAM_HEADER_PREFIX) for key in headers.keys()):
        return
    row = _visible_tools(model_call.pk).get(name)
    if row is None or row.model_facing_name != name:
        return
    rejection = validate_mcp_param_headers((row.rendered or {}).get("inputSchema"), arguments, headers)
    if rejection is not None:
        raise MCPError(rejection.code, rejection.message, data=rejection.data)


def _run_inline(invocation: Invocation) -> dict | None:
    """Run the read admission just claimed for this process (``claim_inline``) with the
    execution service a worker runs (attempt rows, events, retry rules, tool messages). Returns
    the recorded MCP tool message when that ended the call, else None (a retry is scheduled for
    the workers) and the caller waits as for any call. An error on the way (the database lost
    mid-record) is logged and also answered by waiting: the attempt is left open, its lease
    lapses, and recovery retries the read as it does for a worker that died."""
    try:
        done = run_claimed_at_admission(invocation)
    except Exception:  # noqa: BLE001 - logged; the record and recovery carry the call on
        logger.exception("inline read %s did not finish here; left to recovery", invocation.pk)
        return None
    message = (done.written_tool_messages or {}).get("mcp")
    return json.loads(message) if message is not None and done.state in TERMINAL else None


def mcp_call_answer(*, subject: Subject, invocation_id) -> dict | None:
    """The answer for a settled call (the recorded MCP tool message, or the pending-confirmation
    answer), or None while it is still on its way; ``NotFound`` for another subject's or no call."""
    row = _answer_row(subject, invocation_id)
    if row is None:
        raise NotFound(f"no invocation {invocation_id}")
    return _answer_from_row(subject, invocation_id, row)


def mcp_call_poll(*, subject: Subject, invocation_id) -> dict | None:
    """``mcp_call_answer`` for the wait loop: None also while the row is not visible yet."""
    row = _answer_row(subject, invocation_id)
    return None if row is None else _answer_from_row(subject, invocation_id, row)


def _answer_row(subject: Subject, invocation_id) -> tuple | None:
    """(state, stored MCP tool message, expiry of the pending confirmation) in one indexed read:
    the wait loop runs this after every wake-up, and a final call's stored message is the
    answer. A lean prepared statement (``toolops.sql``): building the same queryset cost
    ~1.5 ms of CPU per status read."""
    return state_message_and_pending_expiry(Invocation, ToolMessage, Confirmation, invocation_id=invocation_id,
                                            subject_id=subject.pk, message_format="mcp",
                                            pending=Confirmation.Status.PENDING)


def _answer_from_row(subject: Subject, invocation_id, row: tuple) -> dict | None:
    state, message, pending_until = row
    if state in TERMINAL:
        if message is not None:
            return json.loads(bytes(message))
        # Nothing stored under this id (an approver's edit answers for it, or an old record):
        # the message as the record renders it.
        invocation = Invocation.objects.select_related("proposal", "tool_spec").get(pk=invocation_id, subject=subject)
        return json.loads(tool_message(invocation=invocation, fmt="mcp"))
    if state == State.OUTCOME_UNKNOWN:
        return _in_progress_result(invocation_id, state)  # being reconciled: the model must not retry
    if state == State.AUTHORIZED and pending_until is not None:
        return pending_confirmation_result(invocation_id, pending_until)
    return None  # queued or executing


def mcp_call_still_running(*, subject: Subject, invocation_id) -> dict:
    """The answer when waiting ran out (or the outcome is being reconciled): where it stands."""
    state = Invocation.objects.filter(pk=invocation_id, subject=subject).values_list("state", flat=True).first()
    if state is None:
        raise NotFound(f"no invocation {invocation_id}")
    return _in_progress_result(invocation_id, state)


def _in_progress_result(invocation_id, state: str) -> dict:
    status = "outcome_unknown" if state == State.OUTCOME_UNKNOWN else "working"
    text = (
        f"The call (invocation {invocation_id}) is {state}: "
        + ("it may have happened; a person is checking. Do not retry it. " if status == "outcome_unknown" else "")
        + f'Check it later with {STATUS_TOOL} {{"invocation_id": "{invocation_id}"}}.'
    )
    return _result(text, {"status": status, "invocation_id": str(invocation_id), "state": state})


def pending_confirmation_result(invocation_id, expires_at: datetime) -> dict:
    expires_at = expires_at.isoformat()
    text = (
        f"This call waits for a person to confirm it (invocation {invocation_id}; the request expires at "
        f"{expires_at}). Do not call the tool again for this; check the outcome with {STATUS_TOOL} "
        f'{{"invocation_id": "{invocation_id}"}}.'
    )
    return _result(text, {"status": "pending_confirmation", "invocation_id": str(invocation_id), "expires_at": expires_at})


def mcp_status(*, subject: Subject, arguments: dict | None) -> dict:
    """The built-in ``toolops_invocation_status``: final → the call's own recorded answer."""
    invocation_id = (arguments or {}).get("invocation_id")
    try:
        invocation_id = uuid.UUID(invocation_id)
    except (TypeError, ValueError, AttributeError):
        return _result('invocation_id (a UUID) is required: {"invocation_id": "<uuid>"}', None, is_error=True)
    row = _answer_row(subject, invocation_id)
    if row is None:
        return _result(f"no invocation {invocation_id} for this agent", None, is_error=True)
    answer = _answer_from_row(subject, invocation_id, row)
    return answer if answer is not None else _in_progress_result(invocation_id, row[0])


# --- helpers ----------------------------------------------------------------------------------

def _proposal_id(request: McpRequest) -> str:
    # The JSON-RPC id is unique only per session (and 2026-07-28 clients restart it): a random
    # UUID, ahead of the id so a long one cannot cut it off, makes every tools/call a new
    # proposal (admission skips its "already posted?" probe); exactly-once across re-issues
    # is the idempotency key's job. The JSON-RPC id itself is kept in the proposal's origin.
    return f"mcp-{uuid.uuid4().hex}-{_recorded_id(request.request_id)}"[:200]


def _recorded_id(request_id: str | int | None) -> str | int | None:
    """The JSON-RPC id as a record can hold it (the client chooses it: any string)."""
    return storable_text(request_id, max_chars=_REQUEST_ID_CHARS) if isinstance(request_id, str) else request_id


def _text(value: Any) -> str | None:
    """A ``_meta`` member that must be a string (traceparent, tracestate); anything else is absent."""
    return value if isinstance(value, str) else None


def _idempotency_key(request: McpRequest, run: Run):
    """``_meta["dev.toolops/idempotencyKey"]``, else a factory admission calls with its own plan:
    run + JSON-RPC id + digest (writes only: reads hold no key). The bytes are parsed, validated
    and digested once, by admission (before, this derived the digest with a second admit())."""
    explicit = request.meta.get(IDEMPOTENCY_META_KEY)
    if explicit is not None:
        if not isinstance(explicit, str) or not 1 <= len(explicit) <= 255 or not set(explicit) <= _KEY_CHARS:
            raise ApplicationError(f"{IDEMPOTENCY_META_KEY} must be 1–255 visible ASCII characters",
                                   code="invalid_idempotency_key")
        return explicit

    def from_plan(plan, spec) -> str | None:
        if spec is None or spec.side_effect_class == "read_only" or plan.final_state != State.VALIDATED:
            return None  # a read, or rejected: it claims no key
        request_part = hashlib.sha256(json.dumps(request.request_id).encode()).hexdigest()[:16]
        return f"mcp:{run.pk}:{request_part}:{plan.digest}"

    return from_plan


@functools.lru_cache(maxsize=2048)
def _visible_tools(model_call_id) -> dict[str, ModelCallTool]:
    """A model call's visible set by model-facing name and by ``name@version``. Cached per
    process: a model call's visible set and published ToolSpecs never change."""
    rows = ModelCallTool.objects.select_related("tool_spec").filter(model_call_id=model_call_id)
    return {key: row for row in rows for key in (row.model_facing_name, row.tool_ref)}


def _result(text: str, structured: dict | None, *, is_error: bool = False) -> dict:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": is_error}
    if structured is not None:
        result["structuredContent"] = structured
    return result


def _error_result(exc: ApplicationError) -> dict:
    """A refusal that is not a recorded state (key reuse, budget, ended run): isError, with a code."""
    error = {"code": exc.code, "message": str(exc), **({"detail": exc.extra} if exc.extra else {})}
    return _result(json.dumps({"ok": False, "error": error}, ensure_ascii=False, sort_keys=True),
                   {"ok": False, "error": error}, is_error=True)


def _protocol_error(exc: ApplicationError) -> MCPError:
    return MCPError(types.INVALID_REQUEST, str(exc), data={"code": exc.code, **(exc.extra or {})})
