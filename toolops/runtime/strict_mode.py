"""OpenAI strict mode (``"strict": true``) for a ToolSpec's input schema, and the way back.

With ``strict: true`` OpenAI constrains decoding to the ``parameters`` schema, which must fit
the subset its Structured Outputs guide ("Supported schemas") allows:

* the root is an object (not ``anyOf``); nesting at most 10 levels, at most 5,000 object
  properties and 1,000 enum values in all;
* every object lists **all** its properties in ``required`` and has
  ``"additionalProperties": false``;
* types string, number, integer, boolean, object, array, null, plus ``enum``, ``const``,
  ``anyOf`` and ``$ref`` to ``$defs``; per type only these keywords: string ``pattern`` and
  ``format`` (date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid); number
  ``multipleOf``, ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``; array
  ``items``, ``minItems``, ``maxItems``; ``description`` and ``title`` anywhere.

:func:`strict_form` returns the strict ``parameters`` when the schema fits or **can be made
to fit** without changing what ToolOps accepts:

* an optional property becomes required with ``null`` added to its type (``anyOf`` with
  ``{"type": "null"}`` when it has no plain type). The property's instance path goes into
  ``null_as_absent``; at admission a ``null`` there is removed *before* validation
  (:func:`null_to_absent`), so the original schema judges the call. An optional property that
  already accepts ``null`` is made required unchanged when its ``default`` is ``null`` (null and
  absent then mean the same); otherwise null cannot be mapped back unambiguously and the schema
  stays non-strict;
* an object without ``additionalProperties`` gets ``false`` (the model loses nothing it was
  told about);
* annotations OpenAI refuses (``default``, ``examples``, ``$comment``, ``deprecated``,
  ``readOnly``, ``writeOnly``) are dropped from the rendering; they never affect validation.

Anything else keeps ``strict: false`` with the first reason found. The arguments of a strict
call are always validated against the ToolSpec's own schema: strict mode is a hint to the
model, never a reason to trust it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["StrictForm", "null_to_absent", "strict_form"]

STRICT_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})
STRICT_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
MAX_DEPTH = 10
MAX_PROPERTIES = 5000
MAX_ENUM_VALUES = 1000

_ANNOTATIONS = frozenset({"description", "title"})
_DROPPED = frozenset({"default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"})
_BY_TYPE: dict[str, frozenset[str]] = {
    "string": frozenset({"pattern", "format"}),
    "number": frozenset({"multipleOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "integer": frozenset({"multipleOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "array": frozenset({"items", "minItems", "maxItems"}),
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "boolean": frozenset(),
    "null": frozenset(),
}
_GENERIC = frozenset({"type", "enum", "const", "anyOf", "$ref"}) | _ANNOTATIONS


class NotStrict(Exception):
    """The schema cannot be rendered strict; ``str()`` is the reason shown in the metadata."""


@dataclass(frozen=True)
class StrictForm:
    """What the OpenAI rendering needs: strict or not, why not, and the null mapping."""

    strict: bool
    parameters: dict | None = None  # the strict schema (None when not strict)
    reason: str | None = None
    # Instance paths ("/a/b", "*" for any array index) whose null means "absent".
    null_as_absent: tuple[str, ...] = field(default_factory=tuple)

    def metadata(self) -> dict:
        return {
            "strict": self.strict,
            "strict_reason": self.reason,
            "null_as_absent": list(self.null_as_absent),
        }


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


class _Converter:
    def __init__(self) -> None:
        self.properties = 0
        self.enum_values = 0
        self.null_as_absent: list[str] = []

    def convert(self, schema: Any, *, where: str, instance_path: str | None, depth: int) -> dict:
        """Strict copy of ``schema``. ``instance_path`` is None inside anyOf/$defs (no mapping there)."""
        if depth > MAX_DEPTH:
            raise NotStrict(f"nested deeper than {MAX_DEPTH} levels at {where or '/'}")
        if not isinstance(schema, dict):
            raise NotStrict(f"boolean schema at {where or '/'}")
        out: dict[str, Any] = {}
        types = schema.get("type")
        type_list = [types] if isinstance(types, str) else list(types or [])
        if any(t not in STRICT_TYPES for t in type_list):
            raise NotStrict(f"type {types!r} at {where or '/'}")
        if not type_list and not any(k in schema for k in ("enum", "const", "anyOf", "$ref")):
            raise NotStrict(f"schema without a type at {where or '/'}")
        allowed = set(_GENERIC)
        for t in type_list:
            allowed |= _BY_TYPE[t]
        for key, value in schema.items():
            if key in _DROPPED:
                continue
            if key not in allowed:
                raise NotStrict(f"keyword {key!r} is not supported in strict mode at {where or '/'}")
            if key == "format" and value not in STRICT_FORMATS:
                raise NotStrict(f"format {value!r} is not supported in strict mode at {where or '/'}")
            if key == "enum":
                self.enum_values += len(value)
                if self.enum_values > MAX_ENUM_VALUES:
                    raise NotStrict(f"more than {MAX_ENUM_VALUES} enum values")
            if key in ("properties", "required", "additionalProperties", "items", "anyOf"):
                continue
            out[key] = value
        if "anyOf" in schema:
            out["anyOf"] = [
                self.convert(sub, where=f"{where}/anyOf/{i}", instance_path=None, depth=depth + 1)
                for i, sub in enumerate(schema["anyOf"])
            ]
        if "array" in type_list:
            if "items" not in schema:
                raise NotStrict(f"array without items at {where or '/'}")
            item_path = None if instance_path is None else f"{instance_path}/*"
            out["items"] = self.convert(schema["items"], where=f"{where}/items", instance_path=item_path, depth=depth + 1)
        elif "items" in schema:
            raise NotStrict(f"items without type array at {where or '/'}")
        if "object" in type_list or "properties" in schema:
            self.object(schema, out, where=where, instance_path=instance_path, depth=depth)
        return out

    def object(self, schema: dict, out: dict, *, where: str, instance_path: str | None, depth: int) -> None:
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties:
            raise NotStrict(f"object without declared properties (free-form) at {where or '/'}")
        additional = schema.get("additionalProperties", False)
        if additional is not False:
            raise NotStrict(f"object allows undeclared properties at {where or '/'}")
        required = set(schema.get("required", []))
        self.properties += len(properties)
        if self.properties > MAX_PROPERTIES:
            raise NotStrict(f"more than {MAX_PROPERTIES} object properties")
        converted = {}
        for name, sub in properties.items():
            if name == "*":
                raise NotStrict(f"a property named '*' at {where or '/'} (the array wildcard of null_as_absent)")
            sub_where = f"{where}/properties/{_escape(name)}"
            sub_path = None if instance_path is None else f"{instance_path}/{_escape(name)}"
            strict_sub = self.convert(sub, where=sub_where, instance_path=sub_path, depth=depth + 1)
            if name not in required:
                if sub_path is None:
                    raise NotStrict(f"optional property inside anyOf or $defs at {sub_where}")
                if not _accepts_null(sub):
                    strict_sub = _nullable(strict_sub)
                    self.null_as_absent.append(sub_path)
                elif not ("default" in sub and sub["default"] is None):
                    # null already means something of its own (e.g. "clear the field"), so it
                    # cannot also stand for "absent".
                    raise NotStrict(f"optional property that already accepts null at {sub_where}")
                # else: its declared default is null, so a null and an absent value agree;
                # the null is passed on as sent, and the original schema accepts it.
            converted[name] = strict_sub
        out["properties"] = converted
        out["required"] = list(properties)
        out["additionalProperties"] = False


def _accepts_null(schema: dict) -> bool:
    types = schema.get("type")
    if types == "null" or (isinstance(types, list) and "null" in types):
        return True
    if None in schema.get("enum", [object()]) or ("const" in schema and schema["const"] is None):
        return True
    return any(isinstance(s, dict) and _accepts_null(s) for s in schema.get("anyOf", []))


def _nullable(schema: dict) -> dict:
    """``schema`` that also accepts null (the stand-in for "absent")."""
    types = schema.get("type")
    if isinstance(types, (str, list)) and "anyOf" not in schema and "$ref" not in schema and "const" not in schema:
        out = {**schema, "type": [*([types] if isinstance(types, str) else types), "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    annotations = {k: schema[k] for k in ("description", "title") if k in schema}
    inner = {k: v for k, v in schema.items() if k not in annotations}
    return {**annotations, "anyOf": [inner, {"type": "null"}]}


def strict_form(schema: dict) -> StrictForm:
    """The strict rendering of an object ``schema`` (a ToolSpec input schema), or why not."""
    converter = _Converter()
    try:
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise NotStrict("the root is not an object schema")
        if "anyOf" in schema:
            raise NotStrict("the root uses anyOf")
        defs = schema.get("$defs") or {}
        # The root's $schema names the dialect (OpenAI rejects it); a nested one is a keyword.
        root = {k: v for k, v in schema.items() if k not in ("$defs", "$schema")}
        parameters = converter.convert(root, where="", instance_path="", depth=1)
        if defs:
            parameters["$defs"] = {
                name: converter.convert(sub, where=f"/$defs/{_escape(name)}", instance_path=None, depth=2)
                for name, sub in defs.items()
            }
    except NotStrict as exc:
        return StrictForm(strict=False, reason=str(exc))
    return StrictForm(strict=True, parameters=parameters, null_as_absent=tuple(converter.null_as_absent))


def null_to_absent(arguments: Any, paths: tuple[str, ...] | list[str]) -> tuple[Any, list[str]]:
    """Remove the ``null`` members at ``paths`` (see :class:`StrictForm`); returns a copy and the
    concrete pointers removed. Values elsewhere, and non-null values, are left alone."""
    removed: list[str] = []
    if not paths:
        return arguments, removed

    def walk(value: Any, tokens: list[str], pointer: str) -> Any:
        if not tokens:
            return value
        head, rest = tokens[0], tokens[1:]
        if head == "*":
            if not isinstance(value, list):
                return value
            return [walk(item, rest, f"{pointer}/{i}") for i, item in enumerate(value)]
        if not isinstance(value, dict) or head not in value:
            return value
        copy = dict(value)
        if not rest:
            if copy[head] is None:
                del copy[head]
                removed.append(f"{pointer}/{_escape(head)}")
            return copy
        copy[head] = walk(copy[head], rest, f"{pointer}/{_escape(head)}")
        return copy

    # Deepest paths first, so removing a parent's member never hides a child path.
    for path in sorted(paths, key=lambda p: -p.count("/")):
        tokens = [_unescape(t) for t in path.split("/")[1:]]
        arguments = walk(arguments, tokens, "")
    return arguments, sorted(removed)
