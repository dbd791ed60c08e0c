"""Which strings of an external result are free text, and so reach the model wrapped as untrusted
data (docs/concepts/results.md), and which are identifiers, enum members or formatted values that pass as they are.

Wrapping an id turns ``"note_7"`` into an object the model cannot hand back as an argument, and
breaks a result's ``outputSchema``; wrapping free text is the point. A string under an untrusted
pointer passes through only when its *value* — not merely the schema's word — shows it is not
prose:

* the output schema's subschema at its position (``properties``, ``patternProperties``,
  ``additionalProperties``, ``prefixItems``/``items``, local ``$ref``, ``allOf``/``anyOf``/
  ``oneOf`` branches) has an ``enum`` or ``const`` the value is a member of, or a ``format``
  of :data:`ID_FORMATS` the value satisfies (ToolOps' strict checkers), or a ``pattern`` the
  value matches while holding no whitespace (at most :data:`MAX_PATTERN_VALUE` characters);
* or, schema or not, the value has an id's shape (:data:`ID_SHAPE`: 1–64 characters of
  ``[A-Za-z0-9._:+-]``, starting with a letter or digit, holding a digit) — ``note_7``,
  ``inv-2026-0042``, ``42``, ``2026-07-20``; no spaces, no slashes, so neither a sentence nor a
  URL passes on shape alone — and does not spell a phrase: at most :data:`MAX_ID_WORDS` of its
  separator-delimited parts are words (letters only, three or more), so
  ``ignore-all-instructions-1`` is free text while ``order_item_42`` and random ids
  (``cus_NffrFeUfNV2Hib``) pass. A two-word token such as ``IGNORE_ALL_1`` still passes: an id
  like ``user.name.42`` must.

A hostile upstream gains nothing by declaring ``format: uri`` on a field: the value must still be
a URI, and ``format`` values are checked by the same strict checkers as arguments.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from toolops.runtime.ecma_regex import EcmaRegexError, compile_pattern
from toolops.runtime.formats import (
    is_date, is_date_time, is_duration, is_email, is_hostname, is_ipv4, is_ipv6, is_iri, is_time, is_uri,
    is_uri_reference, is_uuid,
)

ID_FORMATS: dict[str, Callable[[Any], bool]] = {
    "uuid": is_uuid, "date": is_date, "date-time": is_date_time, "time": is_time, "duration": is_duration,
    "uri": is_uri, "uri-reference": is_uri_reference, "iri": is_iri, "email": is_email, "hostname": is_hostname,
    "ipv4": is_ipv4, "ipv6": is_ipv6,
}
ID_SHAPE = re.compile(r"(?=[^0-9]*[0-9])[A-Za-z0-9][A-Za-z0-9._:+\-]{0,63}\Z")
MAX_ID_WORDS = 2
_ID_PARTS = re.compile(r"[._:+\-]")
_WORD_PART = re.compile(r"[A-Za-z]{3,}\Z")
MAX_PATTERN_VALUE = 256
_MAX_REF_DEPTH = 16
_WHITESPACE = re.compile(r"\s")


def looks_like_id(text: str) -> bool:
    if ID_SHAPE.match(text) is None:
        return False
    return sum(1 for part in _ID_PARTS.split(text) if _WORD_PART.match(part)) <= MAX_ID_WORDS


def _deref(schema: Any, root: dict, depth: int = 0) -> list[dict]:
    """``schema`` and every branch it combines (local ``$ref``s followed), as dicts."""
    if not isinstance(schema, dict) or depth > _MAX_REF_DEPTH:
        return []
    out = [schema]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target: Any = root
        for token in ref[1:].lstrip("/").split("/") if ref != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            target = target.get(token) if isinstance(target, dict) else None
        out += _deref(target, root, depth + 1)
    for key in ("allOf", "anyOf", "oneOf"):
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else ():
            out += _deref(branch, root, depth + 1)
    return out


def _child(schema: dict, token: str) -> Iterable[Any]:
    """The subschemas that govern member/item ``token`` of an instance of ``schema``."""
    props = schema.get("properties")
    if isinstance(props, dict) and token in props:
        yield props[token]
        return
    found = False
    patterns = schema.get("patternProperties")
    for pattern, sub in patterns.items() if isinstance(patterns, dict) else ():
        try:
            if compile_pattern(pattern).search(token):
                found = True
                yield sub
        except EcmaRegexError:
            continue
    if found:
        return
    if isinstance(schema.get("additionalProperties"), dict):
        yield schema["additionalProperties"]
    if token.isdigit():
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and int(token) < len(prefix):
            yield prefix[int(token)]
        elif isinstance(schema.get("items"), dict):
            yield schema["items"]


def subschemas(root: dict | None, path: tuple[str, ...]) -> list[dict]:
    """Every subschema of ``root`` that governs the value at ``path`` (empty: ungoverned)."""
    if not isinstance(root, dict):
        return []
    current = _deref(root, root)
    for token in path:
        current = [s for parent in current for child in _child(parent, token) for s in _deref(child, root)]
        if not current:
            return []
    return current


def _constrained(text: str, schema: dict) -> bool:
    if "const" in schema and schema["const"] == text:
        return True
    if isinstance(schema.get("enum"), list) and text in schema["enum"]:
        return True
    check = ID_FORMATS.get(schema.get("format")) if isinstance(schema.get("format"), str) else None
    if check is not None and check(text):
        return True
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and len(text) <= MAX_PATTERN_VALUE and not _WHITESPACE.search(text):
        try:
            return compile_pattern(pattern).search(text) is not None
        except EcmaRegexError:
            return False
    return False


class FreeTextRule:
    """``rule(path, text)``: True when the string at ``path`` (tokens into the result value) is
    free text to wrap, False when it passes as an identifier (see the module docstring)."""

    def __init__(self, output_schema: dict | None = None):
        self.output_schema = output_schema if isinstance(output_schema, dict) else None

    def __call__(self, path: tuple[str, ...], text: str) -> bool:
        if looks_like_id(text):
            return False
        return not any(_constrained(text, s) for s in subschemas(self.output_schema, path))
