"""GET /api/v1/tools: the ToolSpecs a subject may be offered (a quarantined import is not), rendered
for one model ecosystem."""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_api.schema import problem_responses
from toolops.errors import ApplicationError
from toolops.model_io.rendering import FORMATS, render_tool, rendering_metadata

from specs_app.selectors import toolspec_renderable, toolspecs_offered_to_subject


RENDERINGS_HELP = (
    "model-facing name → rendering metadata. format=openai: strict (as rendered), strict_reason "
    "(why not strict, else null), null_as_absent (instance paths whose null ToolOps treats as "
    "an absent optional argument in a strict call); other formats: {}"
)


class ToolListView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=list(FORMATS), description="default: openai")],
        responses={200: inline_serializer("ToolListOut", {
            "format": serializers.CharField(),
            "tools": serializers.ListField(child=serializers.DictField(), help_text="definitions exactly as that ecosystem expects them"),
            "name_map": serializers.DictField(child=serializers.CharField(), help_text="model-facing name → name@version (exact, reversible)"),
            "renderings": serializers.DictField(help_text=RENDERINGS_HELP),
        }), **problem_responses({400: ["invalid_format"]})},
        summary="Tool definitions for the calling subject",
    )
    def get(self, request):
        fmt = request.query_params.get("format", "openai")
        if fmt not in FORMATS:
            raise ApplicationError(f"format must be one of {', '.join(FORMATS)}", code="invalid_format")
        specs = list(toolspecs_offered_to_subject(subject=request.user.subject))
        tools = [toolspec_renderable(s) for s in specs]
        return Response({
            "format": fmt,
            "tools": [render_tool(t, fmt) for t in tools],
            "name_map": {t.model_facing_name: t.ref for t in tools},
            "renderings": {t.model_facing_name: rendering_metadata(t, fmt) for t in tools},
        })
