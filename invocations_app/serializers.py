"""Input and output serializers of the agent API (API.md field names, never renamed)."""
from __future__ import annotations

import base64
import binascii
import json

from django.core.validators import ProhibitNullCharactersValidator
from rest_framework.fields import ProhibitSurrogateCharactersValidator
from rest_framework import serializers

from toolops.runtime.rendering import FORMATS

from .models import Event, Invocation, Run


# --- input ------------------------------------------------------------------------------

class BudgetsIn(serializers.Serializer):
    model_calls = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    tool_calls = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    wall_seconds = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    result_bytes = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    cost = serializers.DecimalField(max_digits=18, decimal_places=6, min_value=0, required=False, allow_null=True)


class RunIn(serializers.Serializer):
    budgets = BudgetsIn(required=False)
    timezone = serializers.CharField(max_length=64, default="UTC")
    locale = serializers.CharField(max_length=35, default="en-US")
    metadata = serializers.DictField(required=False, default=dict)


class ModelCallIn(serializers.Serializer):
    tools = serializers.ListField(child=serializers.CharField(max_length=140), required=False, allow_null=True, default=None)
    format = serializers.ChoiceField(choices=FORMATS, default="openai")
    context = serializers.ListField(child=serializers.UUIDField(), required=False, default=list)


class RawStringField(serializers.CharField):
    """A string kept exactly as sent: no trimming, blanks allowed, NUL characters allowed.

    The model's raw argument text is evidence; the strict parser, not the request layer,
    decides what it means (a lone surrogate is a PARSE_REJECTED proposal, not a 400).
    """

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, allow_blank=True, **kwargs)
        self.validators = [
            v for v in self.validators
            if not isinstance(v, (ProhibitNullCharactersValidator, ProhibitSurrogateCharactersValidator))
        ]


class ProposalIn(serializers.Serializer):
    """One proposal: ``arguments`` (the model's raw string) or ``arguments_b64`` (any bytes)."""

    proposal_id = serializers.CharField(max_length=200)
    name = serializers.CharField(max_length=500, trim_whitespace=False)
    arguments = RawStringField(required=False)
    arguments_b64 = serializers.CharField(required=False, allow_blank=True)

    def validate(self, attrs):
        has_text, has_b64 = "arguments" in attrs, "arguments_b64" in attrs
        if has_text == has_b64:
            raise serializers.ValidationError("give exactly one of 'arguments' or 'arguments_b64'")
        if has_b64:
            try:
                attrs["arguments_bytes"] = base64.b64decode(attrs.pop("arguments_b64"), validate=True)
            except (binascii.Error, ValueError):
                raise serializers.ValidationError({"arguments_b64": "not valid base64"}) from None
        else:
            # 'surrogatepass' keeps a lone surrogate from the JSON body as bytes; the strict
            # parser then rejects them as invalid UTF-8 instead of the request failing here.
            attrs["arguments_bytes"] = attrs.pop("arguments").encode("utf-8", "surrogatepass")
        return attrs


class FunctionIn(serializers.Serializer):
    name = serializers.CharField(max_length=500, trim_whitespace=False)
    arguments = RawStringField()


class ToolCallIn(serializers.Serializer):
    id = serializers.CharField(max_length=200)
    type = serializers.ChoiceField(choices=["function"], default="function")
    function = FunctionIn()


class OpenAIToolCallsIn(serializers.Serializer):
    tool_calls = ToolCallIn(many=True, allow_empty=False)

    def to_proposals(self) -> list[dict]:
        return [
            {
                "proposal_id": tc["id"],
                "name": tc["function"]["name"],
                "arguments_bytes": tc["function"]["arguments"].encode("utf-8", "surrogatepass"),
            }
            for tc in self.validated_data["tool_calls"]
        ]


class CancelIn(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


# --- output -----------------------------------------------------------------------------

def run_to_dict(run: Run) -> dict:
    used = {
        "model_calls": run.model_calls_used,
        # Counted in the Run row only when limited (one UPDATE per proposal); else counted here.
        "tool_calls": run.tool_calls_used if (run.budgets or {}).get("tool_calls") is not None
        else run.invocations.count(),
        "result_bytes": run.result_bytes_used,
        "cost": str(run.cost_used),
    }
    left = {}
    for key, limit in (run.budgets or {}).items():
        if limit is None or key not in used:
            continue
        left[key] = str(max(0, float(limit) - float(used[key]))) if key == "cost" else max(0, int(limit) - int(used[key]))
    return {
        "id": str(run.pk),
        "state": run.status,
        "trace_id": run.trace_id,
        "budgets": run.budgets,
        "used": used,
        "left": left,
        "timezone": run.timezone,
        "locale": run.locale,
        "metadata": run.metadata,
        "created_at": run.created_at.isoformat(),
        "ended_at": run.ended_at.isoformat() if run.ended_at else None,
        "end_reason": run.end_reason or None,
    }


def invocation_to_dict(inv: Invocation) -> dict:
    proposal = inv.proposal
    return {
        "id": str(inv.pk),
        "state": inv.state,
        "tool": inv.tool_ref or None,
        "proposal": {
            "model_call_id": str(proposal.model_call_id),
            "proposal_id": proposal.proposal_id,
            "name": proposal.name,
            "arguments_bytes_b64": base64.b64encode(bytes(proposal.arguments_bytes)).decode("ascii"),
            "parsed": json.loads(proposal.parsed_json) if proposal.parsed_json else None,
            "parser": proposal.parser,
            "span_id": proposal.span_id,
            # MCP proposals: {"transport": "mcp", "session_id", "request_id", …}; {} for REST.
            "origin": proposal.origin,
        },
        "run_id": str(inv.run_id),
        "normalized_arguments": inv.normalized_arguments,
        "normalization_context": inv.normalization_context,
        "normalization_trace": inv.normalization_trace,
        "validation": inv.validation,
        "digest": inv.digest or None,
        "idempotency_key": inv.idempotency_key,
        "deadline": inv.deadline.isoformat() if inv.deadline else None,
        "authorization": _authorization(inv.authorization),
        "confirmation": _confirmation(inv),
        "attempts": [_attempt(a) for a in inv.attempts.all()],
        "result": _result(inv),
        "edited_from": str(inv.edited_from_id) if inv.edited_from_id else None,
        "trace_id": inv.trace_id,
        "span_id": inv.span_id,
        "error": {"code": inv.error_code, "message": inv.error_message, "detail": inv.error_detail}
        if inv.error_code
        else None,
        "created_at": inv.created_at.isoformat(),
        "updated_at": inv.updated_at.isoformat(),
    }


def _attempt(a) -> dict:
    return {
        "number": a.number, "attempt_id": a.span_id, "started_at": a.started_at.isoformat(),
        "sent_at": a.sent_at.isoformat() if a.sent_at else None, "ended_at": a.ended_at.isoformat() if a.ended_at else None,
        "commit": a.commit or None, "failure_class": a.failure_class or None, "decision": a.decision or None,
    }


def _result(inv: Invocation) -> dict | None:
    if not inv.result_status and not inv.commit_status:
        return None
    return {
        "status": inv.result_status or ("unknown" if inv.commit_status == "unknown" else None),
        "value_or_error": inv.result_value if inv.result_status == "ok" else (
            {"code": inv.error_code, "message": inv.error_message} if inv.error_code else None
        ),
        "commit_status": inv.commit_status or None,
        "external_resource_id": inv.external_resource_id or None,
        "observed_at": inv.observed_at.isoformat() if inv.observed_at else None,
    }


def _authorization(record: dict) -> dict | None:
    """The agent-facing part of the decision: never the internal reasons (other grants)."""
    if not record:
        return None
    return {k: record.get(k) for k in ("decision", "capabilities", "reasons", "decided_at")}


def _confirmation(inv: Invocation) -> dict | None:
    latest = max(inv.confirmations.all(), key=lambda c: c.created_at, default=None)
    if latest is None:
        return None
    return {
        "id": str(latest.pk),
        "state": latest.state,
        "digest": latest.digest,
        "expires_at": latest.expires_at.isoformat(),
        "decided_by": latest.decided_by.get_username() if latest.decided_by_id else None,
        "decided_at": latest.decided_at.isoformat() if latest.decided_at else None,
        "reason": latest.reason or None,
        "replacement_invocation_id": str(latest.replacement_id) if latest.replacement_id else None,
    }


class EventOut(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["seq", "at", "from_state", "to_state", "kind", "data", "actor", "trace_id", "span_id"]


class RunOut(serializers.Serializer):
    """Shape of a run (documentation only; built by ``run_to_dict``)."""

    id = serializers.UUIDField()
    state = serializers.ChoiceField(choices=Run.Status.choices)
    trace_id = serializers.CharField()
    budgets = serializers.DictField()
    used = serializers.DictField()
    left = serializers.DictField()
    timezone = serializers.CharField()
    locale = serializers.CharField()
    end_reason = serializers.CharField(allow_null=True)


class InvocationOut(serializers.Serializer):
    """Shape of an invocation (documentation only; built by ``invocation_to_dict``)."""

    id = serializers.UUIDField()
    state = serializers.CharField()
    tool = serializers.CharField(allow_null=True, help_text="name@version")
    proposal = serializers.DictField()
    normalized_arguments = serializers.JSONField(allow_null=True)
    normalization_context = serializers.DictField()
    validation = serializers.DictField()
    digest = serializers.CharField(allow_null=True)
    idempotency_key = serializers.CharField()
    authorization = serializers.DictField(allow_null=True)
    confirmation = serializers.DictField(allow_null=True)
    attempts = serializers.ListField()
    result = serializers.DictField(allow_null=True)
    trace_id = serializers.CharField()
    span_id = serializers.CharField()
    error = serializers.DictField(allow_null=True)
