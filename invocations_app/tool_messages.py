"""Tool messages (SPEC §10): what the model gets back, encoded once, stored as exact bytes, served as stored.

This module owns the encoding (the tool's result policy, its secrets removed, untrusted text
marked) and the reads the agent makes: the tool message of an invocation, and the pages of a
truncated result. Writing the messages happens with the transition that reports them
(``results``, ``admission``, ``cancellation``, ``confirmations``).
"""
from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from toolops.db_batch import insert_rows
from toolops.errors import Conflict
from toolops.runtime.rendering import FORMATS
from toolops.runtime.states import TERMINAL, State
from toolops.runtime.tool_messages import ResultPolicy, ToolResult, encode_result, message_bytes, page, redact, render

from . import executors
from .models import Confirmation, Invocation, ResultBody, ToolMessage

PAGE_BYTES = 16384


def result_policy(invocation: Invocation) -> ResultPolicy:
    spec = invocation.tool_spec
    secrets = executors.secret_values(spec.executor or {}) if spec else []
    return ResultPolicy.from_dict((spec.result_policy if spec else None) or None, secrets=secrets)


def redacted(invocation: Invocation, value: Any) -> Any:
    """A value safe to keep in the record: the tool's secrets and configured patterns removed."""
    return redact(value, policy=result_policy(invocation))


def encode(invocation: Invocation, result: ToolResult):
    return encode_result(result, policy=result_policy(invocation), invocation_id=str(invocation.pk),
                         tool_ref=invocation.tool_ref or invocation.proposal.name)


def message_rows(invocation: Invocation, result: ToolResult, encoded) -> list[list]:
    """The result body and one tool message per format, unsaved (SPEC §10: stored once)."""
    is_error = result.status != "ok"
    return [
        [ResultBody(invocation=invocation, body=encoded.full_bytes, total_bytes=encoded.total_bytes)],
        [ToolMessage(invocation=invocation, format=fmt, message_bytes=message_bytes(
            render(fmt, encoded, tool_call_id=invocation.proposal.proposal_id, is_error=is_error)
        )) for fmt in FORMATS],
    ]


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
            insert_rows(*message_rows(invocation, result, encode(invocation, result)))
    except IntegrityError:
        pass  # a concurrent reader stored them first; serve those
    return bytes(ToolMessage.objects.get(invocation=invocation, format=fmt).message_bytes)


def result_page(*, invocation: Invocation, cursor: str | None) -> tuple[bytes, str | None, int]:
    body = ResultBody.objects.filter(invocation=invocation).first()
    if body is None:
        raise Conflict("this invocation has no stored result", code="no_result")
    chunk, next_cursor = page(bytes(body.body), cursor=cursor, page_bytes=PAGE_BYTES)
    return chunk, next_cursor, body.total_bytes
