"""The approver's view of one confirmation, shared by the console and the Approvals API.

``approval_display(confirmation)`` reads the confirmation's invocation, ToolSpec and proposal
(already loaded, or one query each) and returns plain JSON-able data; the wording lives in the
pure ``toolops.decisions.approval_display``. Nothing here writes.
"""
from __future__ import annotations

from toolops.decisions import approval_display as words

from invocations_app.models import Confirmation, Invocation


def spec_kinds(spec) -> dict[str, dict]:
    """The meanings a ToolSpec declares for its fields (money, datetime, date)."""
    return words.field_kinds(input_schema=spec.input_schema if spec else None, normalizers=spec.normalizers if spec else None)


def approval_display(confirmation: Confirmation) -> dict:
    """What a person deciding ``confirmation`` must read, as data.

    Keys:
      ``arguments_display`` — ``[{"field", "pointer", "kind", "text", "value"}]``, one per top-level
        argument of the digest's normalized arguments (``12.50 EUR``, ``2026-12-02 09:00 +08:00
        (Asia/Shanghai)``);
      ``arguments_text`` — the same as ``field: text`` lines;
      ``why`` — ``{"decision", "text", "reasons", "grants": [{"grant_id", "capability", "effect",
        "scope", "limits", "text"}], "tool_rule"}``, grant limits in the call's units;
      ``risk`` — ``{"side_effect_class", "effect", "idempotency", "undo", "text"}``;
      ``interpretation`` — ``{"raw_text", "context": {"clock", "timezone", "locale"},
        "context_text", "steps": [{"pointer", "normalizer", "input", "output", "changed", "text"}],
        "edited_from": {"invocation_id", "digest", "raw_text"} | None}``;
      ``invocation_id``, ``digest``.
    """
    invocation = confirmation.invocation
    spec = confirmation.tool_spec  # the invocation's, already joined by the queue's query
    kinds = spec_kinds(spec)
    zone = (invocation.normalization_context or {}).get("timezone")
    lines = words.arguments_display(confirmation.arguments, kinds, zone_name=zone)
    currency = words.call_currency(confirmation.arguments, kinds)
    executor = (spec.executor if spec else None) or {}
    interpretation = words.interpretation_display(
        raw=bytes(invocation.proposal.arguments_bytes), context=invocation.normalization_context,
        trace=invocation.normalization_trace, kinds=kinds,
    )
    interpretation["edited_from"] = _edited_from(invocation)
    return {
        "invocation_id": str(invocation.pk),
        "digest": confirmation.digest,
        "arguments_display": lines,
        "arguments_text": "\n".join(f"{line['field']}: {line['text']}" for line in lines),
        "why": words.why_display(authorization=invocation.authorization,
                                 confirmation_policy=spec.confirmation_policy if spec else None, currency=currency),
        "risk": words.risk_display(side_effect_class=spec.side_effect_class if spec else "",
                                   idempotency_key=invocation.idempotency_key, has_lookup=bool(executor.get("lookup"))),
        "interpretation": interpretation,
    }


def _edited_from(invocation: Invocation) -> dict | None:
    original = invocation.edited_from
    if original is None:
        return None
    return {"invocation_id": str(original.pk), "digest": original.digest,
            "raw_text": bytes(original.proposal.arguments_bytes).decode("utf-8", "backslashreplace")}


def edit_difference(invocation: Invocation) -> dict | None:
    """For an approver's edit: both digests and the fields that changed (texts), else None."""
    original = invocation.edited_from
    if original is None:
        return None
    kinds = spec_kinds(invocation.tool_spec)
    zone = (invocation.normalization_context or {}).get("timezone")
    return {
        "original_id": str(original.pk), "original_digest": original.digest, "digest": invocation.digest,
        "changes": words.arguments_difference(original.normalized_arguments, invocation.normalized_arguments, kinds, zone_name=zone),
    }
