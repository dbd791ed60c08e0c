"""Berkeley Function Calling Leaderboard (BFCL) data -> ToolSpec-like dicts and argument dicts.

BFCL function definitions look like JSON Schema but use language type names (``dict``,
``float``, ``HashMap``, ``String``, ``any`` ...) and a few keys that are not JSON Schema.
:func:`bfcl_function_to_spec` turns one into a real 2020-12 ``input_schema``;
:func:`bfcl_ground_truth_call` turns a ground-truth entry into one concrete argument dict.
"""
from __future__ import annotations

from typing import Any

from toolops.runtime.validation import DIALECT_2020_12

# BFCL type name -> JSON Schema type; None means "no type constraint".
BFCL_TYPES: dict[str, str | None] = {
    # Python files
    "dict": "object",
    "float": "number",
    "integer": "integer",
    "string": "string",
    "boolean": "boolean",
    "array": "array",
    "tuple": "array",  # JSON has no tuples; a tuple arrives as an array
    "any": None,
    # Java files
    "HashMap": "object",
    "String": "string",
    "ArrayList": "array",
    "Array": "array",
    "long": "integer",
    "double": "number",
    "char": "string",
    # JavaScript files
    "Boolean": "boolean",
    "": None,  # one JavaScript property has an empty type
}

# JSON Schema keywords carried over unchanged. Everything else (e.g. BFCL's ``optional``)
# is dropped: it is not JSON Schema, and the explicit ``required`` list is authoritative.
_PASSTHROUGH = frozenset({
    "title", "description", "default", "examples", "enum", "const", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "minItems", "maxItems", "uniqueItems",
    "minProperties", "maxProperties",
})


class BFCLConversionError(ValueError):
    """A BFCL definition this converter does not understand (e.g. an unknown type name)."""


def _convert(node: dict, where: str) -> dict:
    """One BFCL parameter schema -> JSON Schema (recursing into properties and items)."""
    if not isinstance(node, dict):
        raise BFCLConversionError(f"{where}: expected an object, got {node!r}")
    out: dict[str, Any] = {}
    if "type" in node:
        bfcl_type = node["type"]
        if bfcl_type not in BFCL_TYPES:
            raise BFCLConversionError(f"{where}: unknown BFCL type {bfcl_type!r}")
        if BFCL_TYPES[bfcl_type] is not None:
            out["type"] = BFCL_TYPES[bfcl_type]
    out.update({k: v for k, v in node.items() if k in _PASSTHROUGH})

    if "properties" in node:
        out["properties"] = {
            name: _convert(sub, f"{where}/properties/{name}")
            for name, sub in node["properties"].items()
        }
    required = list(node["required"]) if isinstance(node.get("required"), list) else []
    # Draft-03 style `"required": true` on a property means "required by my parent".
    for name, sub in node.get("properties", {}).items():
        if isinstance(sub, dict) and sub.get("required") is True:
            required.append(name)
    if required:
        out["required"] = list(dict.fromkeys(required))  # the meta-schema wants unique names

    items = node.get("items")
    if isinstance(items, dict):
        out["items"] = _convert(items, f"{where}/items")
    elif isinstance(items, list):  # positional (tuple) items
        out["prefixItems"] = [_convert(s, f"{where}/items/{i}") for i, s in enumerate(items)]

    enum = out.get("enum")
    if out.get("type") == "array" and enum is not None and not any(
        isinstance(v, list) for v in enum
    ):
        # BFCL lists the allowed *element* values on the array itself. Taken literally no
        # array could ever match a list of scalars, so the enum belongs to the items.
        element = out.setdefault("items", {})
        element.setdefault("enum", out.pop("enum"))

    if "default" in node and node["default"] is None and "type" in out:
        # A parameter defaulting to null (Python's `x: str = None`) accepts null; otherwise
        # the schema would reject its own default.
        out["type"] = [out["type"], "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def bfcl_function_to_spec(fn: dict) -> dict:
    """``{"name", "version": 1, "description", "input_schema"}`` for a BFCL function.

    The name is kept as written (dots included: ToolSpec names are dotted). The top level
    rejects undeclared parameters (``additionalProperties: false``); nested objects stay open,
    as BFCL rarely lists their keys exhaustively.
    """
    name = fn["name"]
    schema = _convert(fn.get("parameters") or {"type": "dict"}, name)
    schema["type"] = "object"
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return {
        "name": name,
        "version": 1,
        "description": fn.get("description", ""),
        "input_schema": {"$schema": DIALECT_2020_12, **schema},
    }


_OMITTED = object()


def _first_acceptable(acceptable: Any) -> Any:
    """First acceptable value of a BFCL list, or ``_OMITTED``."""
    if not isinstance(acceptable, list):
        return _concrete(acceptable)  # a bare literal where a list was expected (rare)
    if not acceptable or acceptable[0] == "":
        # "" means "may be omitted"; an empty list records no acceptable value at all,
        # so nothing can be sent for it either.
        return _OMITTED
    return _concrete(acceptable[0])


def _concrete(value: Any) -> Any:
    """A chosen value; dicts inside it again map keys to lists of acceptable values."""
    if isinstance(value, dict):
        return bfcl_ground_truth_call(value)
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    return value


def bfcl_ground_truth_call(call_params: dict) -> dict:
    """Concrete arguments for one ground-truth call ``{param: [acceptable values...]}``.

    Picks the first acceptable value of each parameter and omits parameters whose first
    acceptable value is ``""`` (BFCL's "may be omitted").
    """
    args = {}
    for name, acceptable in call_params.items():
        value = _first_acceptable(acceptable)
        if value is not _OMITTED:
            args[name] = value
    return args
