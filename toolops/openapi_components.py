"""Hand-written OpenAPI components appended to the generated schema (SPECTACULAR_SETTINGS).

Pure data, importable from settings. ``SafeJSONObject`` documents run ``metadata``: any JSON
object whose strings and keys hold no NUL character (PostgreSQL's jsonb cannot store one).
"""

NO_NUL_PATTERN = "^[^\\u0000]*$"

SCHEMAS = {
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
