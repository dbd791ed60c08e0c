"""Tool messages (docs/concepts/results.md): what the model gets back, encoded once, stored and served
as exact bytes.

This module owns the encoding (the tool's result policy, its secrets removed, untrusted text
marked) and the reads the agent makes: the tool message of an invocation (final, or the interim
``awaiting_confirmation`` / ``outcome_unknown`` one), the pages of a truncated result and the
bytes of a binary one. ``carried_message_rows`` records what a model call carried. Writing the messages happens with the transition that reports them
(``results`` for a result; ``admission``, ``authorization``, ``confirmations``, ``confirmation_edits``
and ``cancellation`` for a call that ends without one, via ``ending_message_rows``). Reads never write.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from toolops.errors import ApplicationError, Conflict
from toolops.model_io.free_text import FreeTextRule
from toolops.model_io.rendering import FORMATS
from toolops.runtime.states import TERMINAL, State
from toolops.model_io.tool_messages import ResultPolicy, ToolResult, encode_result, message_bytes, page, redact, render

from toolops.tool_secrets import secret_values
from invocations_app.models import Confirmation, Invocation, ModelCallMessage, ResultBinary, ResultBody, ToolMessage

PAGE_BYTES = 16384


def result_policy(invocation: Invocation) -> ResultPolicy:
    spec = invocation.tool_spec
    secrets = secret_values()
    return ResultPolicy.from_dict((spec.result_policy if spec else None) or None, secrets=secrets)


def redacted(invocation: Invocation, value: Any) -> Any:
    """A value safe to keep in the record: the tool's secrets and configured patterns removed."""
    return redact(value, policy=result_policy(invocation))


EDIT_NOTICE = ("A person reviewing this call changed its arguments before approving it; this answer is for "
               "the arguments below, not the ones you proposed.")


def answered_tool_call_id(invocation: Invocation) -> str:
    """The model's tool-call id this invocation answers: its own, or for an approver's edit the
    id of the call the model proposed (the edit chain's first invocation)."""
    while invocation.edited_from_id is not None:
        invocation = invocation.edited_from
    return invocation.proposal.proposal_id


def answering_invocation(invocation: Invocation) -> Invocation:
    """The call that answers ``invocation``'s tool-call id: itself, or the last approver's edit of it."""
    if invocation.state != State.CANCELLED_BEFORE_COMMIT:  # only an edited original ends so and has edits
        return invocation
    replacement = invocation.edits.order_by("created_at").first()
    return invocation if replacement is None else answering_invocation(replacement)


def edit_notice(invocation: Invocation) -> dict | None:
    """What the model is told about an approver's edit: that it happened, the arguments now, why."""
    if invocation.edited_from_id is None:
        return None
    decision = Confirmation.objects.filter(replacement=invocation).only("reason").first()
    return {"message": EDIT_NOTICE, "arguments": invocation.normalized_arguments,
            "reason": decision.reason if decision is not None else ""}


def output_schema(invocation: Invocation) -> dict | None:
    """The result's schema where the ToolSpec pins one (an imported MCP tool's ``outputSchema``)."""
    schema = ((invocation.tool_spec.executor or {}) if invocation.tool_spec else {}).get("output_schema")
    return schema if isinstance(schema, dict) else None


_READ = object()


def encode(invocation: Invocation, result: ToolResult, *, notice=_READ):
    """Identifiers, enum members and formatted values of a result stay unmarked (``FreeTextRule``,
    by the output schema where the ToolSpec pins one); free text is marked untrusted once per message.
    ``notice``: the edit notice when the caller already read it (else ``edit_notice`` reads it)."""
    schema = output_schema(invocation)
    return encode_result(result, policy=result_policy(invocation), invocation_id=str(invocation.pk),
                         tool_ref=invocation.tool_ref or invocation.proposal.name,
                         edited_by_approver=edit_notice(invocation) if notice is _READ else notice,
                         free_text=FreeTextRule(schema))


def message_rows(invocation: Invocation, result: ToolResult, encoded) -> list[list]:
    """The result body and one tool message per format, unsaved (docs/concepts/results.md: stored once)."""
    is_error = result.status != "ok"
    return [
        [ResultBody(invocation=invocation, body=encoded.full_bytes, total_bytes=encoded.total_bytes)],
        [ToolMessage(invocation=invocation, format=fmt, message_bytes=message_bytes(
            render(fmt, encoded, tool_call_id=answered_tool_call_id(invocation), is_error=is_error)
        )) for fmt in FORMATS],
    ]


def ending_message_rows(invocation: Invocation, *, error_code: str, error_message: str) -> list[list]:
    """The tool messages of a call that ends without a result — rejected, denied, cancelled or
    expired before its commit boundary — unsaved, to be written by the transition that ends it."""
    result = _ending_result(error_code=error_code, error_message=error_message, commit_status="")
    return message_rows(invocation, result, encode(invocation, result))


def _ending_result(*, error_code: str, error_message: str, commit_status: str) -> ToolResult:
    return ToolResult(status="error", error={"code": error_code or "error", "message": error_message},
                      commit_status=commit_status or "not_committed")


# What the model reads while a call is still open (docs/reference/api.md): never a 409 it cannot answer.
INTERIM = {
    ModelCallMessage.Kind.AWAITING_CONFIRMATION: "a person must confirm this call first; ask again later",
    ModelCallMessage.Kind.OUTCOME_UNKNOWN: "the effect may have happened; a person is checking; do not retry",
}


@dataclass
class _Known:
    """What ``current_message`` needs beyond the invocation rows, read for a whole context at once:
    stored messages, pending confirmations, approvers' edits (replacement, its reason) and the
    model's tool-call id each answers. Queries grow with the depth of edit chains, not with rows."""

    stored: dict = field(default_factory=dict)  # invocation id → stored message bytes (this format)
    awaiting: set = field(default_factory=set)  # ids of AUTHORIZED calls with a pending confirmation
    replacement: dict = field(default_factory=dict)  # edited original's id → its first edit (Invocation)
    edit_reason: dict = field(default_factory=dict)  # an edit's id → the approver's reason
    call_id: dict = field(default_factory=dict)  # invocation id → the tool-call id it answers


def _known(invocations: list[Invocation], fmt: str) -> _Known:
    known = _Known()
    level, unanswered = list(invocations), []
    while level:  # one round per step along approvers' edits (each round: at most three queries)
        ids = [inv.pk for inv in level]
        known.stored.update((i, bytes(b)) for i, b in ToolMessage.objects.filter(invocation_id__in=ids, format=fmt)
                            .values_list("invocation_id", "message_bytes"))
        unanswered += [inv for inv in level if inv.pk not in known.stored]
        open_ids = [inv.pk for inv in level if inv.pk not in known.stored and inv.state == State.AUTHORIZED]
        if open_ids:
            known.awaiting.update(Confirmation.objects.filter(invocation_id__in=open_ids, state=Confirmation.Status.PENDING)
                                  .values_list("invocation_id", flat=True))
        edited = [inv.pk for inv in level if inv.pk not in known.stored and inv.state == State.CANCELLED_BEFORE_COMMIT]
        level = []
        if edited:  # only an edited original ends so and has edits
            for edit in Invocation.objects.filter(edited_from_id__in=edited).select_related("proposal", "tool_spec").order_by("created_at"):
                if edit.edited_from_id not in known.replacement:
                    known.replacement[edit.edited_from_id] = edit
                    level.append(edit)
    edits = [inv.pk for inv in unanswered if inv.edited_from_id is not None]
    if edits:
        known.edit_reason = dict(Confirmation.objects.filter(replacement_id__in=edits).values_list("replacement_id", "reason"))
    # The tool-call id: the proposal's, or for an edit the id of the call the model proposed.
    parent = {inv.pk: inv.edited_from_id for inv in unanswered}
    proposal_id = {inv.pk: inv.proposal.proposal_id for inv in unanswered}
    frontier = {up for up in parent.values() if up is not None} - set(parent)
    while frontier:  # one query per step up an edit chain
        rows = list(Invocation.objects.filter(pk__in=frontier).values_list("pk", "edited_from_id", "proposal__proposal_id"))
        for pk, up, pid in rows:
            parent[pk], proposal_id[pk] = up, pid
        frontier = {up for _, up, _ in rows if up is not None} - set(parent)
    for inv in unanswered:
        root = inv.pk
        while parent.get(root) is not None:
            root = parent[root]
        known.call_id[inv.pk] = proposal_id[root]
    return known


def _edit_notice(invocation: Invocation, known: _Known) -> dict | None:
    if invocation.edited_from_id is None:
        return None
    return {"message": EDIT_NOTICE, "arguments": invocation.normalized_arguments,
            "reason": known.edit_reason.get(invocation.pk, "")}


def _interim_message(invocation: Invocation, kind: str, fmt: str, known: _Known) -> bytes:
    """Deterministic bytes (no clock inside), so the message served and the one recorded with
    the model call that carried it are the same bytes."""
    commit = "unknown" if kind == ModelCallMessage.Kind.OUTCOME_UNKNOWN else "not_applicable"
    encoded = encode_result(
        ToolResult(status="unknown", error={"code": str(kind), "message": INTERIM[kind]}, commit_status=commit),
        policy=result_policy(invocation), invocation_id=str(invocation.pk), tool_ref=invocation.tool_ref,
        edited_by_approver=_edit_notice(invocation, known),
    )
    return message_bytes(render(fmt, encoded, tool_call_id=known.call_id[invocation.pk], is_error=True))


def current_message(*, invocation: Invocation, fmt: str) -> tuple[str, bytes] | None:
    """``(kind, bytes)`` of what the model gets now, or None while there is nothing to say.

    Terminal: the final message as stored with the transition that ended the call. Awaiting a
    human: ``awaiting_confirmation``. In OUTCOME_UNKNOWN: ``outcome_unknown``. Never writes.

    A terminal call without stored messages — one ended before rejections stored theirs, or one
    support resolved after its run had ended, when no model was left to read it — is answered
    with the same encoding from its record, and nothing is stored."""
    return _current(invocation, fmt, _known([invocation], fmt))


def current_messages(*, invocations: list[Invocation], fmt: str) -> dict:
    """``current_message`` of each invocation (by id), read together: one set of reads for a batch."""
    known = _known(invocations, fmt)
    return {invocation.pk: _current(invocation, fmt, known) for invocation in invocations}


def _current(invocation: Invocation, fmt: str, known: _Known) -> tuple[str, bytes] | None:
    stored = known.stored.get(invocation.pk)
    if stored is not None:
        return ModelCallMessage.Kind.FINAL, stored
    answering = known.replacement.get(invocation.pk)
    if answering is not None:  # an approver edited the call: the edited call answers the model's id
        return _current(answering, fmt, known)
    if invocation.pk in known.awaiting:
        kind = ModelCallMessage.Kind.AWAITING_CONFIRMATION
        return kind, _interim_message(invocation, kind, fmt, known)
    if invocation.state == State.OUTCOME_UNKNOWN:
        kind = ModelCallMessage.Kind.OUTCOME_UNKNOWN
        return kind, _interim_message(invocation, kind, fmt, known)
    if invocation.state not in TERMINAL:
        return None
    result = _ending_result(error_code=invocation.error_code, error_message=invocation.error_message,
                            commit_status=invocation.commit_status)
    encoded = encode(invocation, result, notice=_edit_notice(invocation, known))
    return ModelCallMessage.Kind.FINAL, message_bytes(
        render(fmt, encoded, tool_call_id=known.call_id[invocation.pk], is_error=True))


def tool_message(*, invocation: Invocation, fmt: str) -> bytes:
    """The exact bytes for the model (``current_message``); ``Conflict`` (409 ``not_final``)
    while the call runs and there is nothing honest to say yet."""
    current = current_message(invocation=invocation, fmt=fmt)
    if current is None:
        raise Conflict(f"invocation is {invocation.state}; its tool message is not final yet",
                       code="not_final", extra={"state": invocation.state})
    return current[1]


def carried_message_rows(*, invocations: list[Invocation], fmt: str, model_call) -> list[ModelCallMessage]:
    """What a model call carries in its context, unsaved: for each invocation named there, the
    message it read (final or interim), exactly as served. An invocation with nothing to say
    yet carries no message. The context's rows are read together (``_known``), so the number of
    queries does not grow with the number of invocations carried."""
    known = _known(invocations, fmt)
    rows = []
    for invocation in invocations:
        current = _current(invocation, fmt, known)
        if current is not None:
            kind, raw = current
            rows.append(ModelCallMessage(model_call=model_call, invocation=invocation, format=fmt, kind=kind,
                                         message_bytes=raw, sha256=hashlib.sha256(raw).hexdigest()))
    return rows


def binary_url(invocation: Invocation) -> str:
    """Where the agent runtime fetches a binary result (relative to the API's origin)."""
    return f"/api/v1/invocations/{invocation.pk}/binary"


def result_binary(*, invocation: Invocation) -> ResultBinary:
    """A binary result's stored bytes; ``Conflict`` without one, 410 ``result_expired`` past its
    expiry or once purged (the problem names what it was: media type, size, SHA-256)."""
    stored = ResultBinary.objects.filter(invocation=invocation).first()
    if stored is None:
        raise Conflict("this invocation has no binary result", code="no_binary_result")
    if stored.purged_at is not None or stored.expires_at <= timezone.now():
        # Expired (maybe not yet purged: the beat runs every few minutes) — never served either way.
        raise ApplicationError(
            f"the binary result expired at {stored.expires_at.isoformat()}", code="result_expired", status=410,
            extra={"media_type": stored.media_type, "size_bytes": stored.size_bytes, "sha256": stored.sha256,
                   "expired_at": stored.expires_at.isoformat(), "purged": stored.purged_at is not None},
        )
    return stored


def result_page(*, invocation: Invocation, cursor: str | None) -> tuple[bytes, str | None, int]:
    body = ResultBody.objects.filter(invocation=invocation).first()
    if body is None:
        raise Conflict("this invocation has no stored result", code="no_result")
    chunk, next_cursor = page(bytes(body.body), cursor=cursor, page_bytes=PAGE_BYTES)
    return chunk, next_cursor, body.total_bytes
