"""Agent API: runs, model calls, proposals, invocations. Views parse, call a service, serialize."""
from __future__ import annotations

import base64
import re

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from specs_app.api import RENDERINGS_HELP
from specs_app.selectors import toolspec_renderable
from toolops.errors import ApplicationError
from toolops.runtime.rendering import rendering_metadata

from . import selectors
from .admission import proposal_admit
from .cancellation import invocation_cancel
from .runs import model_call_create, run_create, run_finish
from .tool_messages import result_page, tool_message
from .serializers import (
    CancelIn, EventOut, InvocationOut, ModelCallIn, OpenAIToolCallsIn, ProposalIn, RunIn, RunOut,
    invocation_to_dict, run_to_dict,
)

WAIT_PARAM = OpenApiParameter(
    "wait", OpenApiTypes.NUMBER, description="Hold the answer up to this many seconds until the invocation settles."
)
IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key", OpenApiTypes.STR, location=OpenApiParameter.HEADER, required=False,
    description="The runtime's key for the side effect; otherwise derived from run + proposal id.",
)


def _subject(request):
    return request.user.subject


class RunCreateView(APIView):
    @extend_schema(request=RunIn, responses={201: RunOut}, summary="Start a run")
    def post(self, request):
        data = _valid(RunIn, request.data)
        run = run_create(
            subject=_subject(request), budgets=_plain_budgets(data.get("budgets") or {}), timezone_name=data["timezone"],
            locale=data["locale"], metadata=data["metadata"], trace=request.trace,
        )
        request.trace_id = run.trace_id
        return Response(run_to_dict(run), status=status.HTTP_201_CREATED)


class RunDetailView(APIView):
    @extend_schema(responses={200: RunOut}, summary="A run: state, budgets used and left, why it ended")
    def get(self, request, run_id):
        run = selectors.run_get(subject=_subject(request), run_id=run_id)
        request.trace_id = request.trace_id or run.trace_id
        return Response(run_to_dict(run))


class RunFinishView(APIView):
    @extend_schema(request=None, responses={200: RunOut}, summary="End a run")
    def post(self, request, run_id):
        run = selectors.run_get(subject=_subject(request), run_id=run_id)
        return Response(run_to_dict(run_finish(run=run)))


class ModelCallCreateView(APIView):
    @extend_schema(
        request=ModelCallIn,
        responses={201: inline_serializer("ModelCallOut", {
            "id": serializers.UUIDField(), "format": serializers.CharField(), "tools": serializers.ListField(),
            "name_map": serializers.DictField(help_text="model-facing name → name@version"),
            "renderings": serializers.DictField(help_text=RENDERINGS_HELP),
        })},
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
        request=ProposalIn, parameters=[WAIT_PARAM, IDEMPOTENCY_HEADER],
        responses={201: InvocationOut, 200: InvocationOut},
        summary="Post a proposal (or OpenAI-shaped tool_calls); rejections are states, not HTTP errors",
    )
    def post(self, request, model_call_id):
        call = selectors.model_call_get(subject=_subject(request), model_call_id=model_call_id)
        batch = isinstance(request.data, dict) and "tool_calls" in request.data
        proposals = _valid(OpenAIToolCallsIn, request.data, to=lambda s: s.to_proposals()) if batch else [
            _valid(ProposalIn, request.data)
        ]
        results = [
            proposal_admit(
                model_call=call, subject=_subject(request), proposal_id=p["proposal_id"], name=p["name"],
                arguments_bytes=p["arguments_bytes"], idempotency_key=_idempotency_key(request),
                trace=request.trace,
            )
            for p in proposals
        ]
        invocations = selectors.invocations_wait(invocations=[inv for inv, _ in results], seconds=_wait_seconds(request))
        request.trace_id = invocations[0].trace_id
        code = status.HTTP_201_CREATED if any(created for _, created in results) else status.HTTP_200_OK
        body = [invocation_to_dict(inv) for inv in invocations]
        return Response({"invocations": body} if batch else body[0], status=code)


class InvocationDetailView(APIView):
    @extend_schema(parameters=[WAIT_PARAM], responses={200: InvocationOut}, summary="An invocation and its record")
    def get(self, request, invocation_id):
        inv = selectors.invocation_get(subject=_subject(request), invocation_id=invocation_id)
        selectors.invocations_wait(invocations=[inv], seconds=_wait_seconds(request))
        request.trace_id = inv.trace_id
        body = invocation_to_dict(inv)
        # The record (SPEC §12): what the model saw, and where the result went next.
        body["tool_definition_seen"] = selectors.tool_definition_seen(invocation=inv)
        body["included_in_model_calls"] = selectors.model_calls_including(invocation=inv)
        body["tool_messages_available"] = sorted(inv.tool_messages.values_list("format", flat=True))
        return Response(body)


class InvocationEventsView(APIView):
    @extend_schema(responses={200: EventOut(many=True)}, summary="The invocation's append-only event log, in order")
    def get(self, request, invocation_id):
        inv = selectors.invocation_get(subject=_subject(request), invocation_id=invocation_id)
        request.trace_id = inv.trace_id
        return Response(EventOut(selectors.invocation_events(invocation=inv), many=True).data)


class InvocationCancelView(APIView):
    @extend_schema(request=CancelIn, responses={200: InvocationOut}, summary="Cancel before the commit boundary")
    def post(self, request, invocation_id):
        inv = selectors.invocation_get(subject=_subject(request), invocation_id=invocation_id)
        data = _valid(CancelIn, request.data or {})
        inv = invocation_cancel(invocation=inv, actor=f"subject:{_subject(request).pk}", reason=data["reason"])
        request.trace_id = inv.trace_id
        return Response(invocation_to_dict(inv))


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
        parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=["openai", "anthropic", "mcp"])],
        responses={200: OpenApiTypes.OBJECT},
        summary="The exact tool-message bytes recorded for the model (409 until final or awaiting confirmation)",
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
        parameters=[OpenApiParameter("cursor", OpenApiTypes.STR, description="next_cursor from the tool message or the previous page")],
        responses={200: OpenApiTypes.OBJECT},
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
