"""Input and output serializers of the agent API (the field names of docs/reference/api.md, never renamed)."""
from __future__ import annotations

import base64
import binascii
import json
import re

from django.conf import settings
from django.core.validators import ProhibitNullCharactersValidator, RegexValidator
from rest_framework.fields import ProhibitSurrogateCharactersValidator
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from toolops import error_codes
from toolops.errors import ApplicationError
from toolops.model_io.rendering import FORMATS
from toolops.runtime.storable import json_safe_problems, printable
from toolops.runtime.zones import iana_zone_names, is_iana_zone

from invocations_app.models import Event, Invocation, Run


# --- input ------------------------------------------------------------------------------

NO_NUL = RegexValidator(r"^[^\x00]*$", message="Null characters are not allowed.", code="null_characters_not_allowed")

# Standard base64 with its padding: what base64.b64decode(validate=True) accepts.
BASE64 = RegexValidator(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$", message="not valid base64")

# Upper bounds: each budget must fit the counters it is compared with and the dates computed
# from it (a wall_seconds of 2**40 overflowed the run's deadline on every later model call).
MAX_COUNT_BUDGET = 1_000_000
MAX_WALL_SECONDS = 366 * 24 * 3600
MAX_RESULT_BYTES_BUDGET = 2**40
MAX_METADATA_BYTES = 64 * 1024
MAX_LIST_ITEMS = 1000


class StrictCharField(serializers.CharField):
    """A JSON string, nothing else: DRF would turn ``5`` into ``"5"``, which the schema (and a
    generated client) says is invalid. Not trimmed. No NUL character (PostgreSQL text cannot hold one): the
    check is a pattern, so the OpenAPI schema states it too."""

    def __init__(self, **kwargs):
        # Kept exactly as sent: an id the client echoes back must not lose its spaces, and a
        # value of spaces is what the schema's minLength allows, not "blank".
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]
        self.validators.append(NO_NUL)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, nothing else (no ``"5"``, no ``5.0``, no ``true``)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


DECIMAL_BUDGET_PATTERN = r"^\d{1,12}(\.\d{1,6})?$"


@extend_schema_field({
    "oneOf": [{"type": "string", "pattern": DECIMAL_BUDGET_PATTERN},
              {"type": "integer", "minimum": 0, "maximum": 10**12 - 1}],
    "description": "a non-negative amount: a decimal string (up to 12 integer and 6 fraction digits) or an "
                   "integer; never a float, which cannot carry money exactly",
})
class BudgetDecimalField(serializers.DecimalField):
    def validate_empty_values(self, data):
        if data == "" or (isinstance(data, str) and not data.strip()):
            self.fail("invalid")  # DRF would read a blank string as null
        return serializers.Field.validate_empty_values(self, data)

    def to_internal_value(self, data):
        exact = (isinstance(data, str) and re.fullmatch(DECIMAL_BUDGET_PATTERN, data)) or (
            isinstance(data, int) and not isinstance(data, bool)
        )
        if not exact:
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field({"type": "string", "enum": sorted(iana_zone_names()),
                      "description": "an IANA zone name, e.g. Europe/Paris"})
class TimezoneField(StrictCharField):
    pass


class BudgetsIn(serializers.Serializer):
    model_calls = StrictIntegerField(min_value=0, max_value=MAX_COUNT_BUDGET, required=False, allow_null=True)
    tool_calls = StrictIntegerField(min_value=0, max_value=MAX_COUNT_BUDGET, required=False, allow_null=True)
    wall_seconds = StrictIntegerField(min_value=0, max_value=MAX_WALL_SECONDS, required=False, allow_null=True)
    result_bytes = StrictIntegerField(min_value=0, max_value=MAX_RESULT_BYTES_BUDGET, required=False, allow_null=True)
    cost = BudgetDecimalField(max_digits=18, decimal_places=6, min_value=0, required=False, allow_null=True)


# Its OpenAPI shape is a component of its own: agent_api/openapi.py.
@extend_schema_field({"$ref": "#/components/schemas/SafeJSONObject"})
class JSONSafeDictField(serializers.DictField):
    """A JSON object that PostgreSQL can store and any client can read back, up to a size."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        problems = json_safe_problems(value)
        if problems:
            raise serializers.ValidationError(f"not JSON-safe: {'; '.join(problems[:5])}")
        if len(json.dumps(value, ensure_ascii=False).encode()) > MAX_METADATA_BYTES:
            raise serializers.ValidationError(f"larger than {MAX_METADATA_BYTES} bytes as JSON")
        return value


class RunIn(serializers.Serializer):
    budgets = BudgetsIn(required=False)
    timezone = TimezoneField(max_length=64, default="UTC")
    locale = StrictCharField(max_length=35, default="en-US")
    metadata = JSONSafeDictField(required=False, default=dict, help_text=(
        "any JSON object up to 64 KiB: no NUL characters, no lone surrogates, finite numbers"))
    on_behalf_of = StrictCharField(max_length=254, required=False, allow_blank=True, default="", help_text=(
        "the person this run acts for (a console username or email of a user of this tenant; 400 unknown_person "
        "otherwise): separation of duties — they can never approve this run's calls. Without it, the person "
        "an admin bound this agent to (if any)"))

    def validate_timezone(self, value):
        # Checked against the zone list, not by loading it: ZoneInfo("America") raises
        # IsADirectoryError and an over-long name OSError, which are not "unknown zone".
        if not is_iana_zone(value):
            raise ApplicationError(f"unknown IANA timezone {printable(value)!r}", code="invalid_timezone")
        return value



class ModelCallIn(serializers.Serializer):
    tools = serializers.ListField(
        child=StrictCharField(max_length=140), max_length=MAX_LIST_ITEMS, required=False, allow_null=True, default=None,
    )
    format = serializers.ChoiceField(choices=FORMATS, default="openai")
    context = serializers.ListField(child=serializers.UUIDField(), max_length=MAX_LIST_ITEMS, required=False, default=list)


class RawStringField(StrictCharField):
    """A string kept exactly as sent: no trimming, blanks allowed, NUL characters allowed.

    The model's raw argument text is evidence; the strict parser, not the request layer,
    decides what it means (a lone surrogate is a PARSE_REJECTED proposal, not a 400).
    """

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, allow_blank=True, **kwargs)
        self.validators = [
            v for v in self.validators
            if not isinstance(v, ProhibitSurrogateCharactersValidator) and v is not NO_NUL
        ]


class ProposalIn(serializers.Serializer):
    """One proposal: ``arguments`` (the model's raw string) or ``arguments_b64`` (any bytes)."""

    proposal_id = StrictCharField(max_length=200)
    name = StrictCharField(max_length=500, trim_whitespace=False)
    arguments = RawStringField(required=False)
    arguments_b64 = StrictCharField(required=False, allow_blank=True, validators=[BASE64])

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
    name = StrictCharField(max_length=500, trim_whitespace=False)
    arguments = RawStringField(help_text="the model's raw argument string")


class ToolCallIn(serializers.Serializer):
    id = StrictCharField(max_length=200)
    type = serializers.ChoiceField(choices=["function"], default="function")
    function = FunctionIn()


class TooManyToolCalls(ApplicationError):
    status, code, title = 413, "too_many_tool_calls", "Too many tool calls"


SINGLE_PROPOSAL_FIELDS = ("proposal_id", "name", "arguments", "arguments_b64")


class OpenAIToolCallsIn(serializers.Serializer):
    """An assistant message's ``tool_calls`` as OpenAI sends them: one proposal per entry."""

    tool_calls = serializers.ListField(
        child=ToolCallIn(), min_length=1, max_length=settings.TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST,
    )

    def to_internal_value(self, data):
        # Counted before any entry is validated: nothing of an oversized batch is created.
        calls = data.get("tool_calls") if isinstance(data, dict) else None
        cap = settings.TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST
        if isinstance(calls, list) and len(calls) > cap:
            raise TooManyToolCalls(
                f"{len(calls)} tool_calls in one request; at most {cap} (TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST)",
                extra={"max_tool_calls": cap},
            )
        mixed = [f for f in SINGLE_PROPOSAL_FIELDS if isinstance(data, dict) and f in data]
        if mixed:
            raise serializers.ValidationError({f: "not allowed beside tool_calls (give one shape)" for f in mixed})
        return super().to_internal_value(data)

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
    reason = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")


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
        "on_behalf_of": run.on_behalf_of or None,
        "on_behalf_of_user": run.on_behalf_of_user.get_username() if run.on_behalf_of_user_id else None,
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
        "cancel_requested": inv.cancel_requested_at is not None,
        "created_at": inv.created_at.isoformat(),
        "updated_at": inv.updated_at.isoformat(),
    }


def _attempt(a) -> dict:
    return {
        "number": a.number, "attempt_id": a.span_id, "started_at": a.started_at.isoformat(),
        "sent_at": a.sent_at.isoformat() if a.sent_at else None, "ended_at": a.ended_at.isoformat() if a.ended_at else None,
        "commit": a.commit or None, "failure_class": a.failure_class or None, "decision": a.decision or None,
        "remote_key": a.remote_key or None,
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
        "approvals_needed": latest.approvals_needed,
        "approvals": latest.approvals_list(),
        "escalated_at": latest.escalated_at.isoformat() if latest.escalated_at else None,
    }


# --- documentation of the answers (OpenAPI): the dicts above are what is sent ------------------

class AnyJSON(serializers.JSONField):
    """Any JSON value, null included (drf-spectacular renders an unconstrained schema)."""

    def __init__(self, **kwargs):
        super().__init__(allow_null=True, **kwargs)


class EventOut(serializers.ModelSerializer):
    data = serializers.DictField(help_text="kind-specific details of the transition or decision")

    class Meta:
        model = Event
        fields = ["seq", "at", "from_state", "to_state", "kind", "data", "actor", "trace_id", "span_id"]


class BudgetCountsOut(serializers.Serializer):
    model_calls = serializers.IntegerField()
    tool_calls = serializers.IntegerField()
    result_bytes = serializers.IntegerField()
    cost = serializers.CharField(help_text="decimal as a string")


class RunOut(serializers.Serializer):
    """A run (built by ``run_to_dict``)."""

    id = serializers.UUIDField()
    state = serializers.ChoiceField(choices=Run.Status.choices)
    trace_id = serializers.CharField()
    budgets = serializers.DictField(help_text="the limits given at creation")
    used = BudgetCountsOut()
    left = serializers.DictField(help_text="per limited budget: what is left (cost as a decimal string)")
    timezone = serializers.CharField()
    locale = serializers.CharField()
    metadata = serializers.DictField()
    on_behalf_of = serializers.CharField(allow_null=True, help_text="the person this run acts for, as declared")
    on_behalf_of_user = serializers.CharField(allow_null=True, help_text=(
        "the username of the person this run acts for (never its approver): whom on_behalf_of was resolved to, "
        "or the person an admin bound this agent to"))
    created_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    end_reason = serializers.CharField(allow_null=True)


class ProposalRecordOut(serializers.Serializer):
    model_call_id = serializers.UUIDField()
    proposal_id = serializers.CharField()
    name = serializers.CharField(help_text="the name exactly as the model wrote it")
    arguments_bytes_b64 = serializers.CharField(help_text="the model's argument bytes exactly as received, base64")
    parsed = AnyJSON(help_text="the strict parser's output; null when parsing was rejected")
    parser = serializers.DictField()
    span_id = serializers.CharField()


class AttemptOut(serializers.Serializer):
    number = serializers.IntegerField()
    attempt_id = serializers.CharField()
    started_at = serializers.DateTimeField()
    sent_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    commit = serializers.CharField(allow_null=True)
    failure_class = serializers.CharField(allow_null=True)
    decision = serializers.DictField(allow_null=True, help_text="the retry decision after this attempt: action, reason, delay")
    remote_key = serializers.CharField(allow_null=True, help_text="the idempotency key the remote was sent (derived per tenant)")


class AuthorizationOut(serializers.Serializer):
    decision = AnyJSON()
    capabilities = AnyJSON()
    reasons = AnyJSON()
    decided_at = AnyJSON()


class ApprovalOut(serializers.Serializer):
    user = serializers.CharField()
    at = serializers.DateTimeField()


class ConfirmationOut(serializers.Serializer):
    id = serializers.UUIDField()
    state = serializers.CharField()
    digest = serializers.CharField()
    expires_at = serializers.DateTimeField()
    decided_by = serializers.CharField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_null=True)
    replacement_invocation_id = serializers.UUIDField(allow_null=True)
    approvals_needed = serializers.IntegerField(help_text="distinct approvers the call needs (its policy's quorum)")
    approvals = ApprovalOut(many=True, help_text="who approved so far, oldest first")
    escalated_at = serializers.DateTimeField(allow_null=True, help_text="when nobody had decided in the policy's time")


class ResultOut(serializers.Serializer):
    status = serializers.CharField(allow_null=True, help_text="ok | error | unknown")
    value_or_error = AnyJSON()
    commit_status = serializers.CharField(allow_null=True)
    external_resource_id = serializers.CharField(allow_null=True)
    observed_at = serializers.DateTimeField(allow_null=True)


class InvocationErrorOut(serializers.Serializer):
    code = serializers.ChoiceField(choices=error_codes.INVOCATION_CHOICES, help_text=(
        "why the call ended without an effect, or the interim state of a call still open "
        "(the docs' error-codes page)"))
    message = serializers.CharField(allow_blank=True)
    detail = AnyJSON()


class InvocationOut(serializers.Serializer):
    """An invocation (built by ``invocation_to_dict``): rejections are states, not HTTP errors."""

    id = serializers.UUIDField()
    state = serializers.CharField(help_text="the lifecycle state, e.g. AUTHORIZED, PARSE_REJECTED, OBSERVED")
    tool = serializers.CharField(allow_null=True, help_text="name@version")
    proposal = ProposalRecordOut()
    run_id = serializers.UUIDField()
    normalized_arguments = AnyJSON()
    normalization_context = serializers.DictField()
    normalization_trace = AnyJSON()
    validation = serializers.DictField()
    digest = serializers.CharField(allow_null=True)
    idempotency_key = serializers.CharField(allow_blank=True)
    deadline = serializers.DateTimeField(allow_null=True)
    authorization = AuthorizationOut(allow_null=True)
    confirmation = ConfirmationOut(allow_null=True)
    attempts = AttemptOut(many=True)
    result = ResultOut(allow_null=True)
    edited_from = serializers.UUIDField(allow_null=True)
    trace_id = serializers.CharField()
    span_id = serializers.CharField()
    error = InvocationErrorOut(allow_null=True)
    cancel_requested = serializers.BooleanField(help_text="a cancel arrived while an attempt was in flight: the call "
                                                "ends cancelled only if that attempt did not cross the commit boundary")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class CarriedMessageOut(serializers.Serializer):
    model_call_id = serializers.UUIDField()
    format = serializers.ChoiceField(choices=FORMATS)
    kind = serializers.ChoiceField(choices=["final", "awaiting_confirmation", "outcome_unknown"])
    sha256 = serializers.CharField(help_text="SHA-256 of the exact message bytes the model call carried")


class InvocationRecordOut(InvocationOut):
    """GET of one invocation: the call plus what the model saw and where its result went (docs/concepts/record.md)."""

    tool_definition_seen = serializers.DictField(allow_null=True)
    included_in_model_calls = serializers.ListField(child=serializers.UUIDField())
    tool_messages_available = serializers.ListField(child=serializers.ChoiceField(choices=FORMATS))
    messages_carried = CarriedMessageOut(many=True, help_text="every message the model read, interim ones included, "
                                         "with the model call that carried it")


class RefusedProposalOut(serializers.Serializer):
    """Whose tool call a refusal answers."""

    model_call_id = serializers.UUIDField()
    proposal_id = serializers.CharField(help_text="the model's tool_call id")
    name = serializers.CharField()


class RefusalErrorOut(serializers.Serializer):
    code = serializers.CharField(help_text="budget_exhausted or run_ended")
    message = serializers.CharField()
    detail = serializers.DictField(help_text="e.g. {budget, limit}")


class RefusalOut(serializers.Serializer):
    """A tool call of a batch that was recorded but refused (no invocation was made; nothing ran).

    Admitted calls of the same batch are not undone: the batch answers one entry per tool call."""

    kind = serializers.ChoiceField(choices=["refusal"])
    id = serializers.UUIDField(help_text="the recorded refusal (the proposal record's id)")
    proposal = RefusedProposalOut()
    error = RefusalErrorOut()


def refusal_to_dict(error: ApplicationError) -> dict:
    """A batch entry for a tool call refused with ``error`` (which names the recorded refusal)."""
    extra = dict(error.extra)
    proposal = {"model_call_id": extra.pop("model_call_id"), "proposal_id": extra.pop("proposal_id"), "name": extra.pop("name")}
    refusal_id = extra.pop("refusal_id")
    return {"kind": "refusal", "id": refusal_id, "proposal": proposal,
            "error": {"code": error.code, "message": error.message, "detail": extra}}


class InvocationBatchOut(serializers.Serializer):
    """The answer to an OpenAI ``tool_calls`` batch: one entry per tool call, in order — the
    invocation, or the recorded refusal with its id."""

    # An admitted tool call (an invocation) or a refused one (``kind: "refusal"``).
    invocations = PolymorphicProxySerializer(
        component_name="BatchEntry", serializers=[InvocationOut, RefusalOut], resource_type_field_name=None, many=True,
    )


class ModelCallOut(serializers.Serializer):
    id = serializers.UUIDField()
    run_id = serializers.UUIDField()
    format = serializers.ChoiceField(choices=FORMATS)
    tools = serializers.ListField(child=serializers.DictField(), help_text="definitions exactly as that ecosystem expects them")
    name_map = serializers.DictField(child=serializers.CharField(), help_text="model-facing name → name@version")
    renderings = serializers.DictField(help_text="per model-facing name: strict (OpenAI strict mode), strict_reason, null_as_absent")
    context = serializers.ListField(child=serializers.UUIDField())


class ResultPageOut(serializers.Serializer):
    chunk_b64 = serializers.CharField(help_text="raw result bytes of this page, base64")
    chunk_bytes = serializers.IntegerField(min_value=0)
    next_cursor = serializers.CharField(allow_null=True, help_text="null on the last page")
    total_bytes = serializers.IntegerField(min_value=0)


# Tool messages: the exact bytes recorded for each model ecosystem.

class OpenAIToolMessageOut(serializers.Serializer):
    """Chat Completions ``role: tool`` message (format=openai)."""

    role = serializers.ChoiceField(choices=["tool"])
    tool_call_id = serializers.CharField()
    content = serializers.CharField(help_text="JSON text of the result payload")


class TextBlockOut(serializers.Serializer):
    type = serializers.ChoiceField(choices=["text"])
    text = serializers.CharField()


class AnthropicBlockOut(serializers.Serializer):
    """A ``text`` block (the payload), or an ``image`` block after it when the result is an image."""

    type = serializers.ChoiceField(choices=["text", "image"])
    text = serializers.CharField(required=False)
    source = serializers.DictField(required=False, help_text='image: {"type": "base64", "media_type", "data"}')


class MCPBlockOut(serializers.Serializer):
    """A ``text`` block (the payload), or an ``image`` block after it when the result is an image."""

    type = serializers.ChoiceField(choices=["text", "image"])
    text = serializers.CharField(required=False)
    data = serializers.CharField(required=False, help_text="image: base64 bytes")
    mimeType = serializers.CharField(required=False)  # noqa: N815 - MCP's field name


class AnthropicToolResultOut(serializers.Serializer):
    """Messages API ``tool_result`` content block (format=anthropic)."""

    type = serializers.ChoiceField(choices=["tool_result"])
    tool_use_id = serializers.CharField()
    content = AnthropicBlockOut(many=True)
    is_error = serializers.BooleanField()


class MCPCallToolResultOut(serializers.Serializer):
    """MCP ``CallToolResult`` (format=mcp)."""

    content = MCPBlockOut(many=True)
    structuredContent = serializers.DictField()  # noqa: N815 - MCP's field name
    isError = serializers.BooleanField()  # noqa: N815 - MCP's field name


# Request documentation: the proposal body is exactly one of three shapes.

class ProposalTextIn(serializers.Serializer):
    """A proposal whose arguments are the model's raw text."""

    proposal_id = StrictCharField(max_length=200)
    name = StrictCharField(max_length=500, trim_whitespace=False)
    arguments = RawStringField(help_text="the model's raw argument string")


class ProposalBytesIn(serializers.Serializer):
    """A proposal whose arguments are any bytes, base64-encoded."""

    proposal_id = StrictCharField(max_length=200)
    name = StrictCharField(max_length=500, trim_whitespace=False)
    arguments_b64 = StrictCharField(allow_blank=True, validators=[BASE64], help_text="standard base64 of the raw argument bytes")


class AnthropicToolUseIn(serializers.Serializer):
    """One Anthropic ``tool_use`` content block (model call format ``anthropic``); its ``input`` is
    recorded as the exact bytes that arrived."""

    type = serializers.ChoiceField(choices=["tool_use"])
    id = StrictCharField(max_length=200, help_text="the proposal id; the tool_result answers it as tool_use_id")
    name = StrictCharField(max_length=500, trim_whitespace=False)
    input = serializers.JSONField(help_text="the tool's arguments as the model produced them")


class AnthropicMessageIn(serializers.Serializer):
    """An Anthropic assistant Message (or just its ``content``, as a list): its ``tool_use`` blocks
    are proposed in order, other blocks are ignored."""

    content = serializers.ListField(child=serializers.DictField(), help_text="content blocks; tool_use ones are proposed")


class AnthropicBatchOut(InvocationBatchOut):
    """The answer to Anthropic content: the batch, and the next user turn's ``tool_result`` blocks."""

    tool_results = serializers.ListField(
        child=AnthropicToolResultOut(allow_null=True),
        help_text="one per tool_use block, in order: the tool_result to send back now, null while the call runs",
    )
