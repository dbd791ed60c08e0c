"""Hand-written OpenAPI components appended to the generated schema (SPECTACULAR_SETTINGS).

Pure data, importable from settings. ``SafeJSONObject`` documents run ``metadata``: any JSON
object whose strings and keys hold no NUL character (PostgreSQL's jsonb cannot store one).
``Problem`` is the RFC 9457 body every error response extends with its own ``code`` enum;
``ProblemCode`` and ``ConsoleErrorCode`` list those codes of ``toolops.error_codes``
(the docs' error-codes page); ``InvocationErrorCodeEnum`` is generated from the serializer.
"""
from toolops import error_codes

NO_NUL_PATTERN = "^[^\\u0000]*$"

SCHEMAS = {
    "Problem": {
        "type": "object",
        "description": "RFC 9457 problem details; extra members (`errors`, `trace_id`, `state`, …) may follow.",
        "properties": {
            "type": {"type": "string", "format": "uri", "description": "https://toolops.dev/problems/<code>"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "code": {"$ref": "#/components/schemas/ProblemCode"},
            "detail": {"type": "string"},
            "errors": {"description": "field errors of a malformed request (400)"},
            "trace_id": {"type": "string", "description": "present on 500: quote it when reporting the error"},
        },
        "required": ["type", "title", "status", "code", "detail"],
    },
    "ProblemCode": {
        "type": "string", "enum": sorted(error_codes.HTTP),
        "description": "the stable code of an API error; the docs' error-codes page says what each means and what to do",
    },
    "ConsoleErrorCode": {
        "type": "string", "enum": sorted(error_codes.CONSOLE),
        "description": "refusals of decisions by people (staff console): not answered by the agent API",
    },
    "SafeJSONValue": {
        "nullable": True,
        "description": "any JSON value without NUL characters (in strings or keys)",
        "oneOf": [
            {"type": "string", "pattern": NO_NUL_PATTERN},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "array", "items": {"$ref": "#/components/schemas/SafeJSONValue"}},
            {"$ref": "#/components/schemas/SafeJSONObject"},
        ],
    },
    "SafeJSONObject": {
        "type": "object",
        # OpenAPI 3.0 cannot constrain keys (no propertyNames): a key with a NUL is refused too.
        "description": "a JSON object; neither its keys nor its strings may hold a NUL character",
        "additionalProperties": {"$ref": "#/components/schemas/SafeJSONValue"},
    },
}
