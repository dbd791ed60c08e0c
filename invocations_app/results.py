"""Results back to the model (SPEC §10): the last transition of a call, together with its tool messages.

The final transition and the tool messages are written in one transaction, so an invocation
never reaches OBSERVED (or a failure terminal) without its messages, and nothing is written
after a terminal state (failure row 9).
"""
from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.utils import timezone

from toolops import otel
from toolops.runtime.tool_messages import ToolResult

from .budgets import budget_add_result_bytes, result_bytes_increment
from .models import IdempotencyRecord, Invocation
from .tool_messages import encode, message_rows, redacted
from .transitions import TransitionConflict, invocation_transition


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
    encoded = encode(invocation, result)
    # The record keeps what the model got: redacted, untrusted text wrapped — never the raw value.
    fields["result_value"] = json.loads(encoded.full_bytes) if status == "ok" else None
    # A run's budgets never change (the worker's claim has loaded the run already): an uncapped
    # count needs no answer, so it travels with the event and the messages.
    uncapped = (invocation.run.budgets or {}).get("result_bytes") is None
    conflict = None
    # No savepoint (two round trips when nested): the transition goes first, so a lost race
    # has written nothing and is raised after the block, leaving the caller's transaction usable.
    with transaction.atomic(savepoint=False):
        try:
            invocation_transition(
                invocation=invocation, src=src, dst=dst, kind=kind, data=redacted(invocation, data or {}), fields=fields,
                rows=message_rows(invocation, result, encoded),
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
        return  # only writes hold a key record (admission._idempotency_claim)
    IdempotencyRecord.objects.filter(invocation=invocation).update(
        status=IdempotencyRecord.Status.SUCCEEDED if ok else IdempotencyRecord.Status.FAILED
    )
