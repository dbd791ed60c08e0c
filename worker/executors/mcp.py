"""Executor kind ``mcp``: one attempt = one ``tools/call`` on an upstream MCP server.

Config (written by ``worker.upstream_sync.upstream_import``, immutable once published)::

    {"kind": "mcp", "url": "http://…/mcp", "tool": "notes.create", "definition_sha256": "…",
     "credential": "secret:NAME", "max_response_bytes": 1048576,
     "lookup": {"tool": "notes.find_by_key", "key_argument": "idempotency_key", "found_pointer": "/found"},
     "resource_id_pointer": "/note/id"}

Rules, the same as for the HTTP executor:

* refused before anything is sent when the tool is quarantined (its watch row) or when the live
  definition, listed in the same session right before the call, differs from the pin (the
  listing is skipped when this process saw the definition match within
  ``TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS``; the refresh still quarantines a change for every process);
* credentials come from ``settings.TOOLOPS_TOOL_SECRETS`` by reference; the agent's token never
  leaves ToolOps; the (tenant-scoped) idempotency key and the attempt's ``traceparent`` go in
  ``_meta``;
* the egress policy of the HTTP executor (``worker.egress_net``, as for import and refresh): http(s) only, the
  host resolved once and every address checked against the deny-list (a private address only
  when the operator's ``TOOLOPS_EGRESS_ALLOW`` names that address and port), the SDK client
  pinned to that address and origin, no redirects;
* one wall-clock deadline per attempt and a response-size cap (the smaller of the executor's
  ``max_response_bytes`` and the ToolSpec's result policy): an answer past it is not read on
  — a read fails permanently with ``response_too_large``, a write's commit is unknown;
* outcomes: ``structuredContent``/``content`` → the value; ``isError`` → business rejection
  (the tool answered: nothing committed); not reached → ``not_reached``; a timeout or dropped
  connection after the call was written → ``timeout_unknown`` (a write's commit is unknown:
  OUTCOME_UNKNOWN, reconciled by the lookup tool); a JSON-RPC error → ``permanent`` for
  request errors the upstream sent itself, ``transient`` (commit unknown for writes) for server
  errors and for an answer the client could not use (the SDK's own -32700/-32600);
* the upstream's words (an ``isError`` text, a JSON-RPC error message) go in the error's
  ``remote_message``, reported as untrusted text; ``message`` is ToolOps' own.
"""
from __future__ import annotations

import functools
import logging
import time
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from worker.upstream_sync import credential_headers, upstream_drift_seen

from specs_app.upstream_reads import UpstreamGate
from worker import egress_net
from worker.executors import mcp_client
from toolops.decisions.egress import EgressRefused
from toolops.decisions.execution import Commit, ExecutionOutcome, LookupOutcome, classify_status, outcome_for_status
from toolops.model_io.mcp_definitions import result_value, upstream_meta
from toolops.model_io.rendering import parse_tool_ref
from toolops.decisions.requirements import resolve_pointer


logger = logging.getLogger(__name__)

DEFAULT_MAX_RESPONSE_BYTES = 1 << 20
# JSON-RPC codes meaning "your request was refused as such": the tool never ran — when the
# upstream sent them (``mcp_client`` reports the SDK's stand-ins for an unusable answer apart).
REQUEST_ERROR_CODES = frozenset({-32700, -32600, -32601, -32602})


def remote_idempotency_key(ctx) -> str:
    """The key the upstream sees for this attempt: the tenant-scoped derivation of docs/concepts/execution.md
    (``remote_key``, recorded on the attempt), never the runtime's raw key — remote key spaces
    are shared, tenants are not."""
    if not ctx.remote_key:
        raise ValueError("an MCP attempt needs its derived remote key (never the raw key)")
    return ctx.remote_key


def _not_committed(ctx) -> str:
    return Commit.NOT_APPLICABLE if ctx.side_effect_class == "read_only" else Commit.NOT_COMMITTED


def _refused(ctx, code: str, message: str, detail: dict | None = None) -> ExecutionOutcome:
    # "permanent": the retry matrix never repeats it; nothing was sent, so nothing committed.
    return ExecutionOutcome(commit=_not_committed(ctx), failure_class="permanent",
                            error={"code": code, "message": message}, detail=detail or {})


def quarantine_refusal(ctx) -> ExecutionOutcome | None:
    """Refuse a quarantined tool before anything is sent, by the watch row the attempt's context
    read (``worker.attempt.attempt_context``): admission refused it too; this catches a quarantine that
    happened while the call waited for a person or a retry. An inline read that admission claimed
    moments ago in this thread carries no gate and relies on admission's fresh read, plus the
    live pin check when that is due."""
    if ctx.gates_checked_at_admission:
        return None
    gate: UpstreamGate | None = ctx.upstream_gate
    if gate is None:
        raise ValueError("an MCP attempt needs its tool's gate (execution.attempt_context reads it)")
    if gate.quarantined:
        return _refused(ctx, "tool_quarantined", f"{ctx.tool_ref} is quarantined: its upstream definition {gate.state}",
                        {"watch_state": gate.state})
    return None


def egress_pin(config: dict, deadline: float, openers: frozenset) -> mcp_client.Pin:
    """The upstream's checked address (``EgressRefused`` / ``TransportFailure`` before sending)."""
    return egress_net.mcp_pin(str(config.get("url") or ""), openers, deadline)


def _time_left(deadline: float) -> float:
    """What the SDK's exchange may take: the attempt's one deadline (``time.monotonic()``) also
    covered resolving the name, so the exchange gets what is left of it, not a timeout afresh."""
    return max(0.0, deadline - time.monotonic())


def response_cap(config: dict, ctx) -> int:
    return min(int(config.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES)), int(ctx.max_response_bytes))


def execute_mcp(*, config: dict, arguments: Any, ctx, openers: frozenset = frozenset()) -> ExecutionOutcome:
    """One attempt; ``openers``: the operator's allow-listed (address, port) pairs."""
    refusal = quarantine_refusal(ctx)
    if refusal is not None:
        return refusal
    try:
        headers = credential_headers(config.get("credential") or "")
    except ValidationError as exc:
        return _refused(ctx, "executor_misconfigured", "; ".join(exc.messages))
    deadline = ctx.attempt_deadline()
    try:
        pin = egress_pin(config, deadline, openers)
    except EgressRefused as exc:
        return _refused(ctx, exc.code, exc.message)
    except egress_net.TransportFailure as exc:
        return ExecutionOutcome(commit=_not_committed(ctx), failure_class="not_reached",
                                error={"code": "not_reached", "message": exc.message})
    write = ctx.side_effect_class != "read_only"
    meta = upstream_meta(idempotency_key=remote_idempotency_key(ctx) if write else None, traceparent=ctx.traceparent)
    try:
        result = mcp_client.call_tool(
            url=config["url"], headers=headers, name=config["tool"],
            arguments=arguments if isinstance(arguments, dict) else {}, meta=meta, timeout=_time_left(deadline),
            max_bytes=response_cap(config, ctx), pinned_sha256=config.get("definition_sha256"), pin=pin,
            recheck_seconds=settings.TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS, keep_connection=not write,
        )
    except mcp_client.DefinitionDrift as drift:
        name, version = parse_tool_ref(ctx.tool_ref)
        upstream_drift_seen(name=name, version=version, observed=drift.observed)
        return _refused(ctx, "tool_quarantined", f"{ctx.tool_ref}: {drift}; nothing was sent",
                        {"drift": "changed" if drift.observed else "missing"})
    except mcp_client.UpstreamFailure as failure:
        return _failure(failure, ctx)
    return _outcome(config, result, ctx)


def _answered(*, commit: str, failure_class: str, error: dict, remote: str | None, **fields) -> ExecutionOutcome:
    """A failed attempt in ToolOps' words; the upstream's own (``remote``) are outside text, which
    the model reads only as untrusted data (as the HTTP executor's ``remote_message``)."""
    if remote:
        error = {**error, "remote_message": remote}
    return ExecutionOutcome(commit=commit, failure_class=failure_class, error=error,
                            untrusted_text_pointers=("/remote_message",) if remote else (), **fields)


def _failure(failure: mcp_client.UpstreamFailure, ctx) -> ExecutionOutcome:
    read_only = ctx.side_effect_class == "read_only"
    detail = {"phase": failure.phase, "kind": failure.kind, "http_status": failure.http_status}
    failed = functools.partial(_answered, remote=failure.remote_message, detail=detail)
    if failure.http_status:
        # An HTTP refusal maps as it would for the HTTP executor; before the call was written
        # it is a refusal of the session, so nothing can have committed.
        if failure.reached:
            commit, failure_class = outcome_for_status(status=failure.http_status, side_effect_class=ctx.side_effect_class)
        else:
            commit, failure_class = _not_committed(ctx), classify_status(failure.http_status)
        return failed(commit=commit, failure_class=failure_class, http_status=failure.http_status,
                      error={"code": failure_class, "message": failure.message, "http_status": failure.http_status})
    if not failure.reached:
        return failed(commit=_not_committed(ctx), failure_class="not_reached",
                      error={"code": "not_reached", "message": failure.message})
    if failure.kind == "too_large" and read_only:
        # The same question gets the same oversized answer: retrying only repeats the transfer.
        return failed(commit=Commit.NOT_APPLICABLE, failure_class="permanent",
                      error={"code": "response_too_large", "message": failure.message})
    if failure.kind == "jsonrpc_error" and failure.code in REQUEST_ERROR_CODES:
        return failed(commit=_not_committed(ctx), failure_class="permanent",
                      error={"code": "permanent", "message": failure.message, "jsonrpc_code": failure.code})
    if failure.kind in ("jsonrpc_error", "bad_answer"):
        # A server error, or an answer the client could not use: the call was received, the tool may have acted.
        return failed(commit=Commit.NOT_APPLICABLE if read_only else Commit.UNKNOWN, failure_class="transient",
                      error={"code": "transient", "message": failure.message, "jsonrpc_code": failure.code})
    # Timed out, dropped, or too large after the call was written: the tool may have acted. A cut
    # at the deadline says so, as the HTTP executor's does (a read that ends on it was not "unknown").
    code = "deadline_exceeded" if failure.kind == "timeout" else "outcome_unknown"
    return failed(commit=Commit.NOT_APPLICABLE if read_only else Commit.UNKNOWN, failure_class="timeout_unknown",
                  error={"code": code, "message": failure.message})


def _outcome(config: dict, result: mcp_client.CallResult, ctx) -> ExecutionOutcome:
    if result.is_error:
        text = " ".join(b.get("text", "") for b in result.content if b.get("type") == "text")[:500]
        return _answered(commit=_not_committed(ctx), failure_class="business_rejected", remote=text.strip() or None,
                         error={"code": "business_rejected", "message": "the tool reported an error"})
    value, untrusted = result_value(structured=result.structured, content=result.content)
    read_only = ctx.side_effect_class == "read_only"
    return ExecutionOutcome(
        commit=Commit.NOT_APPLICABLE if read_only else Commit.COMMITTED, value=value,
        external_resource_id=_resource_id(config.get("resource_id_pointer"), value), untrusted_text_pointers=untrusted,
    )


def _resource_id(pointer: str | None, value: Any) -> str | None:
    if not pointer:
        return None
    found, rid = resolve_pointer(value, pointer)
    return str(rid) if found and rid is not None else None


def lookup_mcp(*, config: dict, arguments: Any, ctx, openers: frozenset = frozenset()) -> LookupOutcome:
    """Ask the upstream's lookup tool whether the effect with this key exists."""
    spec = config.get("lookup") or {}
    if not spec.get("tool"):
        return LookupOutcome(committed=None, detail={"reason": "tool offers no lookup"})
    deadline = ctx.attempt_deadline()
    try:
        pin = egress_pin(config, deadline, openers)
    except EgressRefused as exc:
        return LookupOutcome(committed=None, detail={"reason": f"the egress policy refused the lookup ({exc.code})"})
    except egress_net.TransportFailure:
        return LookupOutcome(committed=None, detail={"reason": "the upstream could not be reached"})
    try:
        result = mcp_client.call_tool(
            url=config["url"], headers=credential_headers(config.get("credential") or ""), name=spec["tool"],
            arguments={spec.get("key_argument", "idempotency_key"): remote_idempotency_key(ctx)},
            meta=upstream_meta(idempotency_key=None, traceparent=ctx.traceparent), timeout=_time_left(deadline),
            max_bytes=response_cap(config, ctx), pin=pin,
        )
    except mcp_client.UpstreamFailure as failure:
        return LookupOutcome(committed=None, detail={"error": failure.kind, "phase": failure.phase})
    except ValidationError as exc:  # the credential reference does not resolve
        return LookupOutcome(committed=None, detail={"error": "executor_misconfigured", "message": "; ".join(exc.messages)})
    if result.is_error or not isinstance(result.structured, dict):
        return LookupOutcome(committed=None, detail={"reason": "the lookup tool gave no structured answer"})
    found, flag = resolve_pointer(result.structured, spec.get("found_pointer", "/found"))
    if not found or not isinstance(flag, bool):
        return LookupOutcome(committed=None, detail={"reason": "no found flag in the lookup answer"})
    if not flag:
        return LookupOutcome(committed=False, detail={"lookup": spec["tool"]})
    value = result.structured
    return LookupOutcome(committed=True, value=value, detail={"lookup": spec["tool"]},
                         external_resource_id=_resource_id(config.get("resource_id_pointer"), value))
