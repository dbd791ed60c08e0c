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


class DepthLimitedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1) if stream is not None else b""
        if len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise PayloadTooLarge(f"the request body exceeds {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")
        try:
            check_depth(body.decode("utf-8", errors="replace"), MAX_BODY_DEPTH)
        except ParseRejected:
            raise ParseError(f"request body nested deeper than {MAX_BODY_DEPTH}") from None
        return super().parse(io.BytesIO(body), media_type, parser_context)
