"""The API's request-body parser: DRF's JSON parser behind a nesting-depth guard."""
from __future__ import annotations

import io

from django.conf import settings
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

from toolops.runtime.parser import ParseRejected, check_depth

# Envelopes are shallow; arguments travel as strings. Anything deeper is not a ToolOps request,
# and refusing it here keeps Python's recursive json decoder from hitting its recursion limit.
MAX_BODY_DEPTH = 32


class PayloadTooLarge(APIException):
    status_code = 413
    default_code = "payload_too_large"
    default_detail = "request body too large"


RAW_BODY_ATTRIBUTE = "toolops_raw_body"


def raw_body(request) -> bytes:
    """The JSON body exactly as it arrived (after ``request.data`` was read): where a proposal's bytes
    are cut from when the model's arguments travel as a JSON value (Anthropic ``tool_use.input``)."""
    request.data  # noqa: B018 - parses the body, which keeps its bytes
    return getattr(request._request, RAW_BODY_ATTRIBUTE, b"")


class DepthLimitedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1) if stream is not None else b""
        if len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise PayloadTooLarge(f"the request body exceeds {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")
        try:
            check_depth(body.decode("utf-8", errors="replace"), MAX_BODY_DEPTH)
        except ParseRejected:
            raise ParseError(f"request body nested deeper than {MAX_BODY_DEPTH}") from None
        if parser_context and "request" in parser_context:
            setattr(parser_context["request"]._request, RAW_BODY_ATTRIBUTE, body)
        return super().parse(io.BytesIO(body), media_type, parser_context)
