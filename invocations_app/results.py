"""Results back to the model (docs/concepts/results.md): the last transition of a call, together with its tool messages.

The final transition and the tool messages are written in one transaction, so an invocation
never reaches OBSERVED (or a failure terminal) without its messages, and nothing is written
after a terminal state (failure row 9).
"""
from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from toolops import otel
from toolops.sql import Counted
from toolops.model_io.media import BinaryBody
from toolops.model_io.secret_forms import secret_matcher
from toolops.model_io.tool_messages import IMAGE_BLOCK_MAX_BYTES, IMAGE_BLOCK_TYPES, InlineImage, ToolResult

from invocations_app.budgets import budget_add_result_bytes, result_bytes_increment
from invocations_app.models import IdempotencyRecord, Invocation, ResultBinary, ToolMessage
from invocations_app.tool_messages import binary_url, encode, message_rows, redacted, result_policy
from invocations_app.transitions import TransitionConflict, invocation_transition

# Executors whose output comes from outside ToolOps: untrusted by default (docs/concepts/results.md).
EXTERNAL_EXECUTORS = ("http", "mcp")


def invocation_finish_with_message(
    *, invocation: Invocation, src: str, dst: str, kind: str, status: str, value: Any = None, error: dict | None = None,
    commit_status: str, external_resource_id: str | None = None, untrusted_text_pointers=(), data: dict | None = None,
    binary: BinaryBody | None = None, first: Counted | None = None,
) -> Invocation:
    """The last transition of a call, together with the tool messages that report it.

    Strings from an external executor reach the model as untrusted data unless the ToolSpec
    opts out (``result_policy.untrusted_text``); a ``binary`` body is stored as bytes and the
    value becomes its reference (media type, size, SHA-256, result URL, expiry). ``first``: as
    for ``invocation_transition``."""
    now = timezone.now()
    extra_rows, image = [], None
    if binary is not None:
        value, extra_rows, image = _binary_result(invocation, binary, now=now)
    pointers = _untrusted_pointers(invocation, status=status, reported=untrusted_text_pointers, binary=binary is not None)
    result = ToolResult(status=status, value=value, error=error, commit_status=commit_status,
                        external_resource_id=external_resource_id, untrusted_text_pointers=pointers, image=image)
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
    # A binary result's bytes count too: they are stored and served, only referenced in the message.
    nbytes = encoded.total_bytes + (binary.size if extra_rows else 0)
    conflict = None
    message_rows_written = message_rows(invocation, result, encoded)
    # No savepoint (two round trips when nested): the transition goes first, so a lost race
    # has written nothing and is raised after the block, leaving the caller's transaction usable.
    with transaction.atomic(savepoint=False):
        try:
            invocation_transition(
                invocation=invocation, src=src, dst=dst, kind=kind, data=redacted(invocation, data or {}), fields=fields,
                rows=[*message_rows_written, *extra_rows],
                statements=[result_bytes_increment(run_id=invocation.run_id, nbytes=nbytes)] if uncapped else (),
                first=first,
            )
        except TransitionConflict as exc:
            conflict = exc
        else:
            _settle_idempotency(invocation, ok=status == "ok")
            # What was just written, for a caller that answers with it once this commits
            # (the MCP front door's inline reads) instead of reading it back.
            invocation.written_tool_messages = {
                row.format: row.message_bytes for rows in message_rows_written for row in rows
                if isinstance(row, ToolMessage)}
            if not uncapped:
                budget_add_result_bytes(run_id=invocation.run_id, nbytes=nbytes)
    if conflict is not None:
        raise conflict
    otel.export_span(
        name="toolops.invocation", trace_id=invocation.trace_id, span_id=invocation.span_id,
        parent_span_id=invocation.proposal.span_id, start=invocation.created_at, end=now, error=status != "ok",
        attributes={"toolops.tool": invocation.tool_ref, "toolops.state": dst, "toolops.commit_status": commit_status,
                    **otel.tool_call_attributes(tool=invocation.tool_name, call_id=invocation.proposal.proposal_id,
                                                error_type=None if status == "ok" else (error or {}).get("code") or dst)},
    )
    return invocation


def _untrusted_pointers(invocation: Invocation, *, status: str, reported, binary: bool) -> tuple[str, ...]:
    reported = tuple(reported)
    if status != "ok":
        return reported  # an error's pointers name the remote's own words (remote_message)
    policy = result_policy(invocation)
    if binary:  # ToolOps wrote the reference; only the media type came from the remote
        return policy.untrusted_pointers(external=False, reported=("/binary/media_type",))
    kind = ((invocation.tool_spec.executor or {}) if invocation.tool_spec else {}).get("kind")
    return policy.untrusted_pointers(external=kind in EXTERNAL_EXECUTORS, reported=reported)


def _binary_result(invocation: Invocation, binary: BinaryBody, *, now) -> tuple[dict, list, InlineImage | None]:
    """The reference the model reads, the row that keeps the bytes, and the image block (if any).

    Bytes holding a configured secret (in any form ``secret_forms`` knows) are not kept:
    redacting inside an image would corrupt it, so the reference says it was withheld."""
    reference = {"media_type": binary.media_type, "size_bytes": binary.size, "sha256": binary.sha256,
                 "truncated": binary.truncated}
    matcher = secret_matcher(result_policy(invocation).secrets)
    if matcher is not None and matcher.search(binary.data.decode("latin-1")):
        return {"binary": {**reference, "withheld": "the bytes contain a tool credential"}}, [], None
    expires = now + timedelta(seconds=settings.TOOLOPS_BINARY_RETENTION_SECONDS)
    reference.update(url=binary_url(invocation), expires_at=expires.isoformat())
    row = ResultBinary(invocation=invocation, media_type=binary.media_type, body=binary.data, size_bytes=binary.size,
                       sha256=binary.sha256, truncated=binary.truncated, created_at=now, expires_at=expires)
    showable = binary.media_type in IMAGE_BLOCK_TYPES and not binary.truncated and binary.size <= IMAGE_BLOCK_MAX_BYTES
    image = InlineImage(media_type=binary.media_type, data=binary.data) if showable else None
    return {"binary": reference}, [[row]], image


def _settle_idempotency(invocation: Invocation, *, ok: bool) -> None:
    if invocation.tool_spec_id is None or invocation.tool_spec.side_effect_class == "read_only":
        return  # only writes hold a key record (admission._idempotency_claim)
    IdempotencyRecord.objects.filter(invocation=invocation).update(
        status=IdempotencyRecord.Status.SUCCEEDED if ok else IdempotencyRecord.Status.FAILED
    )
