"""Results back to the model (SPEC §10): encode once, store the exact bytes, serve them as stored.

The final transition and the tool messages are written in one transaction, so an invocation
never reaches OBSERVED (or a failure terminal) without its messages, and nothing is written
after a terminal state (failure row 9).
"""
from __future__ import annotations

import json
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from toolops import otel
from toolops.db_batch import insert_rows
from toolops.errors import Conflict
from toolops.runtime.rendering import FORMATS
from toolops.runtime.states import TERMINAL, State
from toolops.runtime.tool_messages import ResultPolicy, ToolResult, encode_result, message_bytes, page, redact, render

from . import executors
from .budgets import budget_add_result_bytes, result_bytes_increment
from .models import Confirmation, IdempotencyRecord, Invocation, ResultBody, ToolMessage
from .services import TransitionConflict, invocation_transition

PAGE_BYTES = 16384


def result_policy(invocation: Invocation) -> ResultPolicy:
    spec = invocation.tool_spec
    secrets = executors.secret_values(spec.executor or {}) if spec else []
    return ResultPolicy.from_dict((spec.result_policy if spec else None) or None, secrets=secrets)


def redacted(invocation: Invocation, value: Any) -> Any:
    """A value safe to keep in the record: the tool's secrets and configured patterns removed."""
    return redact(value, policy=result_policy(invocation))


def _encode(invocation: Invocation, result: ToolResult):
    return encode_result(result, policy=result_policy(invocation), invocation_id=str(invocation.pk),
                         tool_ref=invocation.tool_ref or invocation.proposal.name)


def _message_rows(invocation: Invocation, result: ToolResult, encoded) -> list[list]:
    """The result body and one tool message per format, unsaved (SPEC §10: stored once)."""
    is_error = result.status != "ok"
    return [
        [ResultBody(invocation=invocation, body=encoded.full_bytes, total_bytes=encoded.total_bytes)],
        [ToolMessage(invocation=invocation, format=fmt, message_bytes=message_bytes(
            render(fmt, encoded, tool_call_id=invocation.proposal.proposal_id, is_error=is_error)
        )) for fmt in FORMATS],
    ]


def invocation_finish_with_message(
    *, invocation: Invocation, src: str, dst: str, kind: str, status: str, value: Any = None, error: dict | None = None,
    commit_status: str, external_resource_id: str | None = None, untrusted_text_pointers=(), data: dict | None = None,
) -> Invocation:
    """The last transition of a call, together with the tool messages that report it."""
    result = ToolResult(status=status, value=value, error=error, commit_status=commit_status,
                        external_resource_id=external_resource_id, untrusted_text_pointers=tuple(untrusted_text_pointers))
    now = timezone.now()
    fields = {"commit_status": commit_status, "observed_at": now, "next_attempt_at": None, "result_status": status}
    if external_resource_id:
        fields["external_resource_id"] = external_resource_id
    if error:
        error = redacted(invocation, error)
        fields.update(error_code=error.get("code", ""), error_message=error.get("message", ""), error_detail=error)
    encoded = _encode(invocation, result)
    # The record keeps what the model got: redacted, untrusted text wrapped — never the raw value.
    fields["result_value"] = json.loads(encoded.full_bytes) if status == "ok" else None
    # A run's budgets never change: the one already loaded tells whether bytes are capped. An
    # uncapped count needs no answer, so it travels with the event and the messages.
    uncapped = Invocation.run.is_cached(invocation) and (invocation.run.budgets or {}).get("result_bytes") is None
    conflict = None
    # No savepoint (two round trips when nested): the transition goes first, so a lost race
    # has written nothing and is raised after the block, leaving the caller's transaction usable.
    with transaction.atomic(savepoint=False):
        try:
            invocation_transition(
                invocation=invocation, src=src, dst=dst, kind=kind, data=redacted(invocation, data or {}), fields=fields,
                rows=_message_rows(invocation, result, encoded),
                statements=[result_bytes_increment(run_id=invocation.run_id, nbytes=encoded.total_bytes)] if uncapped else (),
            )
        except TransitionConflict as exc:
            conflict = exc
        else:
            _settle_idempotency(invocation, ok=status == "ok")
            if not uncapped:
                budget_add_result_bytes(run_id=invocation.run_id, nbytes=encoded.total_bytes)
    if conflict is not None:
        raise conflict
    otel.export_span(
        name="toolops.invocation", trace_id=invocation.trace_id, span_id=invocation.span_id,
        parent_span_id=invocation.proposal.span_id, start=invocation.created_at, end=now, error=status != "ok",
        attributes={"toolops.tool": invocation.tool_ref, "toolops.state": dst, "toolops.commit_status": commit_status},
    )
    return invocation


def _settle_idempotency(invocation: Invocation, *, ok: bool) -> None:
    if invocation.tool_spec_id is None or invocation.tool_spec.side_effect_class == "read_only":
        return  # only writes hold a key record (services._idempotency_claim)
    IdempotencyRecord.objects.filter(invocation=invocation).update(
        status=IdempotencyRecord.Status.SUCCEEDED if ok else IdempotencyRecord.Status.FAILED
    )


def _awaiting_confirmation(invocation: Invocation) -> bool:
    return invocation.state == State.AUTHORIZED and invocation.confirmations.filter(state=Confirmation.Status.PENDING).exists()


def tool_message(*, invocation: Invocation, fmt: str) -> bytes:
    """The exact bytes for the model. Terminal: stored once (rejections encoded on first read);
    awaiting a human: an interim notice, not stored; otherwise ``Conflict`` (409)."""
    stored = ToolMessage.objects.filter(invocation=invocation, format=fmt).first()
    if stored is not None:
        return bytes(stored.message_bytes)
    if _awaiting_confirmation(invocation):
        encoded = encode_result(
            ToolResult(status="unknown", error={"code": "awaiting_confirmation",
                                                "message": "a human must confirm this call; ask again later"}),
            policy=result_policy(invocation), invocation_id=str(invocation.pk), tool_ref=invocation.tool_ref,
        )
        return message_bytes(render(fmt, encoded, tool_call_id=invocation.proposal.proposal_id, is_error=True))
    if invocation.state not in TERMINAL:
        raise Conflict(f"invocation is {invocation.state}; its tool message is not final yet",
                       code="not_final", extra={"state": invocation.state})
    result = ToolResult(
        status="error", error={"code": invocation.error_code or "error", "message": invocation.error_message},
        commit_status=invocation.commit_status or "not_committed",
    )
    try:
        with transaction.atomic():
            insert_rows(*_message_rows(invocation, result, _encode(invocation, result)))
    except IntegrityError:
        pass  # a concurrent reader stored them first; serve those
    return bytes(ToolMessage.objects.get(invocation=invocation, format=fmt).message_bytes)


def result_page(*, invocation: Invocation, cursor: str | None) -> tuple[bytes, str | None, int]:
    body = ResultBody.objects.filter(invocation=invocation).first()
    if body is None:
        raise Conflict("this invocation has no stored result", code="no_result")
    chunk, next_cursor = page(bytes(body.body), cursor=cursor, page_bytes=PAGE_BYTES)
    return chunk, next_cursor, body.total_bytes
