"""The strict JSON parser of docs/concepts/admission.md layer 1: bytes → one JSON value, or a ``ParseRejected``.

Stricter than RFC 8259 where the runtime needs it. Each rejection carries a stable ``reason``:

* ``too_large``               the input is longer than ``max_bytes`` (checked first, before decoding)
* ``bom``                     a UTF-8 byte-order mark precedes the value (RFC 8259 §8.1: must not add one)
* ``invalid_utf8``            not strict UTF-8 (also UTF-16/Latin-1 input, overlong forms, surrogates)
* ``empty``                   only whitespace, or nothing
* ``too_deep``                arrays/objects nested deeper than ``max_depth``; found by an iterative
                              pre-scan, so a hostile 100,000-level input never reaches a recursive decoder
* ``duplicate_key``           the same member name twice in one object, at any depth
* ``non_finite_number``       the ``NaN``, ``Infinity`` or ``-Infinity`` literals
* ``number_out_of_range``     a number that overflows a double (``1e999``) or an integer literal that
                              no double holds exactly: every accepted value must be canonicalizable by
                              RFC 8785 (integers beyond ±(2**53 − 1) that a double holds exactly are
                              accepted as that double, like the same number written ``1e16``)
* ``invalid_unicode_escape``  a ``\\u`` escape that leaves a lone surrogate (not encodable as UTF-8)
* ``trailing_data``           anything but whitespace after the value
* ``syntax_error``            everything else (bad tokens, control characters in strings, …)

The parser never raises anything but ``ParseRejected``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import rfc8785

PARSER_NAME = "toolops.strict_json"
PARSER_VERSION = "1"
MAX_SAFE_INTEGER = 2**53 - 1

_WHITESPACE = " \t\n\r"


@dataclass(frozen=True)
class ParserLimits:
    max_bytes: int = 1_048_576
    max_depth: int = 64


DEFAULT_LIMITS = ParserLimits()


class ParseRejected(Exception):
    """Why the bytes are not one acceptable JSON value."""

    code = "parse_rejected"

    def __init__(self, reason: str, message: str, offset: int | None = None):
        super().__init__(f"{reason}: {message}")
        self.reason, self.message, self.offset = reason, message, offset

    def as_dict(self) -> dict:
        return {"code": self.code, "reason": self.reason, "message": self.message, "offset": self.offset}


def parser_record(limits: ParserLimits = DEFAULT_LIMITS) -> dict:
    """What is stored with every proposal: which parser, which version, which limits."""
    return {"name": PARSER_NAME, "version": PARSER_VERSION, "max_bytes": limits.max_bytes, "max_depth": limits.max_depth}


def parse_strict(data: bytes, limits: ParserLimits = DEFAULT_LIMITS) -> Any:
    """Parse ``data`` strictly; see the module docstring for every rejection reason."""
    if len(data) > limits.max_bytes:
        raise ParseRejected("too_large", f"{len(data)} bytes exceed the limit of {limits.max_bytes}", limits.max_bytes)
    if data.startswith(b"\xef\xbb\xbf"):
        raise ParseRejected("bom", "a UTF-8 byte-order mark precedes the value", 0)
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise ParseRejected("invalid_utf8", f"not valid UTF-8 ({exc.reason})", exc.start) from None
    if not text.strip(_WHITESPACE):
        raise ParseRejected("empty", "no JSON value", 0)
    check_depth(text, limits.max_depth)
    try:
        value = _DECODER.decode(text)
    except ParseRejected:
        raise
    except json.JSONDecodeError as exc:
        reason = "trailing_data" if exc.msg == "Extra data" else "syntax_error"
        raise ParseRejected(reason, f"{exc.msg} at line {exc.lineno} column {exc.colno}", exc.pos) from None
    except (ValueError, RecursionError, OverflowError) as exc:  # belt and braces: never leak these
        raise ParseRejected("syntax_error", str(exc)[:200]) from None
    _check_strings(value)
    return value


def check_depth(text: str, max_depth: int) -> None:
    """Reject nesting deeper than ``max_depth`` without recursion (brackets inside strings skipped)."""
    if text.count("[") + text.count("{") <= max_depth:
        return  # cannot be deeper than the number of openers
    depth, in_string, escaped = 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                raise ParseRejected("too_deep", f"nesting deeper than {max_depth}", i)
        elif ch in "]}":
            depth -= 1


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict:
    obj: dict = {}
    for key, value in pairs:
        if key in obj:
            raise ParseRejected("duplicate_key", f"member name {key[:80]!r} appears twice")
        obj[key] = value
    return obj


def _reject_constant(name: str) -> Any:
    raise ParseRejected("non_finite_number", f"{name} is not a JSON number")


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ParseRejected("number_out_of_range", f"{text[:40]} overflows a double")
    return value


def _parse_int(text: str) -> int | float:
    """Safe integers stay ints; a larger literal is accepted only as RFC 8785 spells a double.

    That is the I-JSON / RFC 8785 number model: ``1e16`` and ``10000000000000000`` are the same
    double and are accepted alike, and canonicalization prints a large integral double as such
    a literal, which must parse back to the same value. A literal that is not the canonical
    spelling of a double (``9007199254740993``) would be silently rounded: refused.
    """
    digits = len(text.lstrip("-"))
    if digits <= 15:
        return int(text)
    # Digit count first: int() of a 100,000-digit literal is slow and raises on 3.11+ limits;
    # beyond 21 digits RFC 8785 switches to exponent notation, so no such literal is canonical.
    value = int(text) if digits <= 21 else None
    if value is not None and abs(value) <= MAX_SAFE_INTEGER:
        return value
    if value is not None and rfc8785.dumps(float(value)) == text.encode("ascii"):
        return float(value)
    raise ParseRejected("number_out_of_range", f"integer {text[:40]} is not exactly the canonical form of a double")


_DECODER = json.JSONDecoder(
    object_pairs_hook=_object_pairs, parse_constant=_reject_constant, parse_float=_parse_float, parse_int=_parse_int,
    strict=True,
)


def _check_strings(value: Any) -> None:
    """Lone surrogates from ``\\u`` escapes cannot be encoded as UTF-8: reject them (iteratively)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _check_string(item)
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_string(key)
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)


def _check_string(s: str) -> None:
    if s.isascii():
        return
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise ParseRejected("invalid_unicode_escape", "a \\u escape leaves a lone surrogate") from None
