"""Agent API: runs, model calls, proposals, invocations. Views parse, call a service, serialize."""
from __future__ import annotations

import base64
import json
import re

from django.conf import settings
from django.db.models import prefetch_related_objects
from django.http import HttpResponse
from django.utils.cache import patch_vary_headers
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from specs_app.selectors import toolspec_renderable
from agent_api.minimal import InvocationMinimalOut, invocations_minimal, prefers_minimal
from agent_api.schema import problem_responses
from toolops.errors import ApplicationError
from toolops.model_io.anthropic_tool_use import EXPECTED_SHAPES, ToolUseShapeError, is_tool_use_body, tool_uses
from toolops.model_io.rendering import rendering_metadata
from toolops.runtime.states import State

from invocations_app import selectors
from invocations_app.admission import proposal_admit
from invocations_app.cancellation import invocation_cancel
from invocations_app.runs import model_call_create, run_create, run_finish
from invocations_app.tool_messages import current_messages, result_binary, result_page, tool_message
from agent_api.parsers import raw_body
from agent_api.serializers import (
    AnthropicBatchOut, AnthropicMessageIn, AnthropicToolResultOut, AnthropicToolUseIn, CancelIn, EventOut, InvocationBatchOut, InvocationOut, InvocationRecordOut,
    MCPCallToolResultOut, ModelCallIn, ModelCallOut, OpenAIToolCallsIn, OpenAIToolMessageOut, ProposalBytesIn,
    ProposalIn, ProposalTextIn, ResultPageOut, RunIn, RunOut, TooManyToolCalls, invocation_to_dict, refusal_to_dict,
    run_to_dict,
)
from invocations_app.models import Invocation

WAIT_PARAM = OpenApiParameter(
    "wait", {"type": "number", "minimum": 0},
    description="Hold the answer up to this many seconds (capped by TOOLOPS_MAX_WAIT_SECONDS) until the invocation settles.",
)
IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key", {"type": "string", "pattern": r"^[\x21-\x7e]{1,255}$"}, location=OpenApiParameter.HEADER,
    required=False, description="The runtime's key for the side effect (1–255 visible ASCII characters); "
    "otherwise derived from run + proposal id.",
)
# The three shapes a proposals POST may take (exactly one of them).
PROPOSAL_REQUEST = PolymorphicProxySerializer(
    component_name="Proposal",
    serializers=[ProposalTextIn, ProposalBytesIn, OpenAIToolCallsIn, AnthropicToolUseIn, AnthropicMessageIn],
    resource_type_field_name=None,
)
PROPOSAL_ANSWER = PolymorphicProxySerializer(
    component_name="ProposalAnswer", serializers=[InvocationOut, InvocationBatchOut, AnthropicBatchOut, InvocationMinimalOut],
    resource_type_field_name=None,
)
PREFER_HEADER = OpenApiParameter(
    "Prefer", str, location=OpenApiParameter.HEADER, required=False,
    description="`return=minimal`: answer each call compactly — id, state, tool, digest, pending confirmation, "
    "error and the `tool_message` for the model (null while it runs) — instead of the full record; the "
    "answer then carries `Preference-Applied: return=minimal`.",
)
TOOL_MESSAGE = PolymorphicProxySerializer(
    component_name="ToolMessage", serializers=[OpenAIToolMessageOut, AnthropicToolResultOut, MCPCallToolResultOut],
    resource_type_field_name=None,
)


def _subject(request):
    return request.user.subject


class RunCreateView(APIView):
    @extend_schema(request=RunIn, responses={201: RunOut, **problem_responses(
        {400: ["invalid_timezone", "unknown_person", "on_behalf_of_conflict"]}, body=True)},
                   summary="Start a run")
    def post(self, request):
        data = _valid(RunIn, request.data)
        run = run_create(
            subject=_subject(request), budgets=_plain_budgets(data.get("budgets") or {}), timezone_name=data["timezone"],
            locale=data["locale"], metadata=data["metadata"], trace=request.trace, on_behalf_of=data["on_behalf_of"],
        )
        request.trace_id = run.trace_id
        return Response(run_to_dict(run), status=status.HTTP_201_CREATED)


class RunDetailView(APIView):
    @extend_schema(responses={200: RunOut, **problem_responses({404: ["not_found"]})},
                   summary="A run: state, budgets used and left, why it ended")
    def get(self, request, run_id):
        run = selectors.run_get(subject=_subject(request), run_id=run_id)
        request.trace_id = request.trace_id or run.trace_id
        return Response(run_to_dict(run))


class RunFinishView(APIView):
    @extend_schema(request=None, responses={200: RunOut, **problem_responses({404: ["not_found"]})}, summary="End a run")
    def post(self, request, run_id):
        run = selectors.run_get(subject=_subject(request), run_id=run_id)
        return Response(run_to_dict(run_finish(run=run)))


class ModelCallCreateView(APIView):
    @extend_schema(
        request=ModelCallIn,
        responses={201: ModelCallOut, **problem_responses({
            400: ["invalid_format", "unknown_tool", "duplicate_tool", "unknown_context"], 404: ["not_found"], 409: ["run_ended"],
            429: ["budget_exhausted"],
        }, body=True)},
        summary="Register a model call and the exact tool versions it is shown",
    )
    def post(self, request, run_id):
        run = selectors.run_get(subject=_subject(request), run_id=run_id)
        data = _valid(ModelCallIn, request.data)
        call = model_call_create(run=run, tool_refs=data["tools"], fmt=data["format"], context=data["context"])
        request.trace_id = request.trace_id or run.trace_id
        visible = list(call.visible_tools.select_related("tool_spec"))
        return Response(
            {
                "id": str(call.pk), "run_id": str(run.pk), "format": call.format,
                "tools": [t.rendered for t in visible],
                "name_map": {t.model_facing_name: t.tool_ref for t in visible},
                "renderings": {
                    t.model_facing_name: rendering_metadata(toolspec_renderable(t.tool_spec), call.format) for t in visible
                },
                "context": call.context,
            },
            status=status.HTTP_201_CREATED,
        )


class ProposalCreateView(APIView):
    @extend_schema(
        request=PROPOSAL_REQUEST, parameters=[WAIT_PARAM, IDEMPOTENCY_HEADER, PREFER_HEADER],
        responses={
            201: PROPOSAL_ANSWER, 200: PROPOSAL_ANSWER,
            **problem_responses({
                400: ["invalid_idempotency_key"], 404: ["not_found"],
                409: ["run_ended", "proposal_conflict", "idempotency_key_in_use"],
                413: ["too_many_tool_calls"], 422: ["idempotency_key_reused", "idempotency_key_expired"],
                429: ["budget_exhausted"],
            }, body=True),
        },
        summary="Post a proposal (or OpenAI tool_calls, or Anthropic tool_use blocks); rejections are states, not HTTP errors",
        description=(
            "The body is exactly one of: a proposal with `arguments` (the model's raw text), a proposal with "
            "`arguments_b64` (any bytes), an OpenAI `tool_calls` list (at most TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST "
            "entries), or — on a model call in format `anthropic` — Anthropic content as the Messages API returns it: one "
            "`tool_use` block, the list of content blocks, or the whole Message (other blocks ignored; each `input` is "
            "recorded as the exact bytes sent; the answer adds `tool_results`, one `tool_result` block per tool_use, null "
            "while that call runs). A single proposal answers one invocation; `tool_calls` answers `{\"invocations\": [...]}` "
            "with one entry per tool call, in order: the invocation, or — when a run budget refused it — the recorded "
            "refusal (`kind: \"refusal\"`, its `id`, the `proposal` and the `error`). Calls admitted before a "
            "refusal are never undone. A single refused proposal answers `429 budget_exhausted` naming the recorded "
            "refusal (`refusal_id`, `proposal_id`, `budget`). 201 when anything new was recorded, 200 for an exact replay."
        ),
    )
    def post(self, request, model_call_id):
        call = selectors.model_call_get(subject=_subject(request), model_call_id=model_call_id)
        data = request.data
        tool_use = _is_tool_use(call, data)
        batch = tool_use or (isinstance(data, dict) and "tool_calls" in data)
        if tool_use:
            proposals = _tool_use_proposals(request, data)
        elif batch:
            proposals = _valid(OpenAIToolCallsIn, data, to=lambda s: s.to_proposals())
        else:
            proposals = [_valid(ProposalIn, data)]
        results = [self._admit(request, call, p, batch=batch) for p in proposals]
        invocations = [inv for inv, _ in results if isinstance(inv, Invocation)]
        wait = _wait_seconds(request)
        if wait > 0 and invocations:  # without ?wait= the answer is what admission just wrote: nothing to re-read
            selectors.invocations_wait(invocations=invocations, seconds=wait)
        # A batch's attempts and confirmations in one query each, not two per tool call.
        prefetch_related_objects(invocations, "attempts", "confirmations__decided_by")
        request.trace_id = invocations[0].trace_id if invocations else call.run.trace_id
        code = status.HTTP_201_CREATED if any(created for _, created in results) else status.HTTP_200_OK
        minimal = prefers_minimal(request)
        if minimal:
            compact = invocations_minimal(invocations, fmt=call.format)
            shape = lambda inv: compact[inv.pk]  # noqa: E731
        else:
            shape = invocation_to_dict
        body = [shape(inv) if isinstance(inv, Invocation) else inv for inv, _ in results]
        answer = {"invocations": body} if batch else body[0]
        if tool_use:  # the user turn's content, as the Messages API takes it back
            answer["tool_results"] = _tool_results([inv for inv, _ in results], invocations)
        response = Response(answer, status=code)
        patch_vary_headers(response, ["Prefer"])
        if minimal:
            response["Preference-Applied"] = "return=minimal"
        return response

    @staticmethod
    def _admit(request, call, proposal: dict, *, batch: bool):
        """One tool call: ``(invocation, created)``; in a batch a refused one is ``(refusal entry,
        created)`` — every tool call gets its entry, and admitted ones are never undone."""
        try:
            return proposal_admit(
                model_call=call, subject=_subject(request), proposal_id=proposal["proposal_id"], name=proposal["name"],
                arguments_bytes=proposal["arguments_bytes"], idempotency_key=_idempotency_key(request),
                trace=request.trace,
            )
        except ApplicationError as exc:
            if not batch or "refusal_id" not in exc.extra:
                raise
            return refusal_to_dict(exc), not getattr(exc, "replayed", False)


class InvocationDetailView(APIView):
    @extend_schema(parameters=[WAIT_PARAM], responses={200: InvocationRecordOut, **problem_responses({
        400: ["malformed_request"], 404: ["not_found"]})}, summary="An invocation and its record")
    def get(self, request, invocation_id):
        inv = selectors.invocation_get(subject=_subject(request), invocation_id=invocation_id)
        wait = _wait_seconds(request)
        if wait > 0:  # a plain poll answers what was just read
            selectors.invocations_wait(invocations=[inv], seconds=wait)
        request.trace_id = inv.trace_id
        # The record (docs/concepts/record.md): what the model saw, and where the result went next.
        return Response({**invocation_to_dict(inv), **selectors.invocation_record_links(invocation=inv)})


class InvocationEventsView(APIView):
    @extend_schema(responses={200: EventOut(many=True), **problem_responses({404: ["not_found"]})},
                   summary="The invocation's append-only event log, in order")
    def get(self, request, invocation_id):
        inv = selectors.invocation_get(subject=_subject(request), invocation_id=invocation_id)
        request.trace_id = inv.trace_id
        return Response(EventOut(selectors.invocation_events(invocation=inv), many=True).data)


class InvocationCancelView(APIView):
    @extend_schema(request=CancelIn, responses={
        200: InvocationOut, 202: InvocationOut, **problem_responses({404: ["not_found"], 409: ["not_cancellable"]}, body=True),
    }, summary="Cancel before the commit boundary",
        description="200: cancelled (CANCELLED_BEFORE_COMMIT, or FAILED_BEFORE_COMMIT `cancelled` between attempts). "
        "202 with `cancel_requested: true`: an attempt is in flight; the call ends cancelled only if it did not "
        "cross the commit boundary. 409 `not_cancellable`: the effect, if any, stands.")
    def post(self, request, invocation_id):
        inv = selectors.invocation_get(subject=_subject(request), invocation_id=invocation_id)
        data = _valid(CancelIn, request.data)  # no body: {}; a JSON null or a list is refused
        inv = invocation_cancel(invocation=inv, actor=f"subject:{_subject(request).pk}", reason=data["reason"])
        request.trace_id = inv.trace_id
        pending = inv.state == State.EXECUTING and inv.cancel_requested_at is not None
        return Response(invocation_to_dict(inv), status=status.HTTP_202_ACCEPTED if pending else status.HTTP_200_OK)


def _is_tool_use(call, data) -> bool:
    """Anthropic content (tool_use blocks) rather than a proposal or OpenAI tool_calls: on an
    ``anthropic`` model call, anything that is not one of those two shapes is read as content, so a
    wrong shape is answered with the shapes expected."""
    if isinstance(data, dict) and ("proposal_id" in data or "tool_calls" in data):
        return False
    if call.format != "anthropic" and is_tool_use_body(data):
        raise ApplicationError(
            f"tool_use content blocks are taken on a model call in format anthropic; this one is {call.format}",
            code="malformed_request", extra={"expected": EXPECTED_SHAPES},
        )
    return call.format == "anthropic"


def _tool_use_proposals(request, data) -> list[dict]:
    try:
        uses = tool_uses(data, raw_body(request))
    except ToolUseShapeError as exc:
        raise ApplicationError(str(exc), code="malformed_request", extra={"expected": EXPECTED_SHAPES}) from None
    cap = settings.TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST
    if len(uses) > cap:  # counted before any is admitted: nothing of an oversized batch is created
        raise TooManyToolCalls(f"{len(uses)} tool_use blocks in one request; at most {cap} "
                               "(TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST)", extra={"max_tool_calls": cap})
    return [{"proposal_id": u.proposal_id, "name": u.name, "arguments_bytes": u.arguments_bytes} for u in uses]


def _tool_results(entries: list, invocations: list[Invocation]) -> list:
    """One ``tool_result`` block per tool_use block, in order: the message for the model now, or
    null while that call runs (or when a run budget refused it: the entry says why)."""
    messages = current_messages(invocations=invocations, fmt="anthropic")
    return [
        json.loads(messages[inv.pk][1]) if isinstance(inv, Invocation) and messages.get(inv.pk) else None
        for inv in entries
    ]


def _valid(serializer_class, data, to=None):
    ser = serializer_class(data=data)
    ser.is_valid(raise_exception=True)
    return to(ser) if to else ser.validated_data


def _plain_budgets(budgets: dict) -> dict:
    return {k: (str(v) if k == "cost" and v is not None else v) for k, v in budgets.items() if v is not None}


IDEMPOTENCY_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


def _idempotency_key(request) -> str | None:
    """The runtime's ``Idempotency-Key``: 1–255 visible ASCII characters, or absent."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not IDEMPOTENCY_KEY_RE.match(key):
        raise ApplicationError("Idempotency-Key must be 1–255 visible ASCII characters", code="invalid_idempotency_key")
    return key


def _wait_seconds(request) -> float:
    raw = request.query_params.get("wait")
    if raw in (None, ""):
        return 0.0
    try:
        seconds = float(raw)
    except ValueError:
        raise ApplicationError("wait must be a number of seconds", code="malformed_request") from None
    if not 0 <= seconds < float("inf"):
        raise ApplicationError("wait must be a non-negative number of seconds", code="malformed_request")
    return min(seconds, settings.TOOLOPS_MAX_WAIT_SECONDS)


class InvocationToolMessageView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=["openai", "anthropic", "mcp"], description="default: openai")],
        responses={200: TOOL_MESSAGE, **problem_responses({400: ["invalid_format"], 404: ["not_found"], 409: ["not_final"]})},
        summary="The exact tool-message bytes for the model: final, awaiting_confirmation or outcome_unknown (else 409)",
    )
    def get(self, request, invocation_id):
        fmt = request.query_params.get("format", "openai")
        if fmt not in ("openai", "anthropic", "mcp"):
            raise ApplicationError("format must be one of openai, anthropic, mcp", code="invalid_format")
        inv = selectors.invocation_get(subject=_subject(request), invocation_id=invocation_id)
        request.trace_id = inv.trace_id
        return HttpResponse(tool_message(invocation=inv, fmt=fmt), content_type="application/json")


class InvocationResultView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("cursor", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"},
                                 description="next_cursor from the tool message or the previous page (opaque)")],
        responses={200: ResultPageOut, **problem_responses({400: ["invalid_cursor"], 404: ["not_found"], 409: ["no_result"]})},
        summary="The rest of a truncated result, page by page (raw bytes, base64)",
    )
    def get(self, request, invocation_id):
        inv = selectors.invocation_get(subject=_subject(request), invocation_id=invocation_id)
        try:
            chunk, next_cursor, total = result_page(invocation=inv, cursor=request.query_params.get("cursor"))
        except ValueError:
            raise ApplicationError("invalid cursor", code="invalid_cursor") from None
        request.trace_id = inv.trace_id
        return Response({"chunk_b64": base64.b64encode(chunk).decode("ascii"), "chunk_bytes": len(chunk),
                         "next_cursor": next_cursor, "total_bytes": total})


class InvocationBinaryView(APIView):
    @extend_schema(
        responses={(200, "application/octet-stream"): OpenApiResponse(
            OpenApiTypes.BINARY, description="the bytes exactly as the tool sent them; Content-Type is their media type"),
            **problem_responses({404: ["not_found"], 409: ["no_binary_result"], 410: ["result_expired"]})},
        summary="A binary result's bytes (the tool message references them by media type, size and SHA-256)",
    )
    def get(self, request, invocation_id):
        inv = selectors.invocation_get(subject=_subject(request), invocation_id=invocation_id)
        stored = result_binary(invocation=inv)
        request.trace_id = inv.trace_id
        response = HttpResponse(bytes(stored.body), content_type=stored.media_type)
        response["Content-Disposition"] = f'attachment; filename="{inv.pk}"'  # never rendered inline by a browser
        response["X-Content-Type-Options"] = "nosniff"
        response["ETag"] = f'"{stored.sha256}"'
        response["Repr-Digest"] = f"sha-256=:{base64.b64encode(bytes.fromhex(stored.sha256)).decode('ascii')}:"
        return response
