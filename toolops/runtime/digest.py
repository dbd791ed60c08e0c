"""Canonical JSON (RFC 8785) and the invocation digest of docs/concepts/admission.md."""
from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

DIGEST_ALGORITHM = "sha256"


class CanonicalizationError(ValueError):
    """A value that RFC 8785 cannot represent (e.g. an integer beyond IEEE-754 precision)."""

    code = "canonicalization_failed"


def canonical_json(value: Any) -> bytes:
    """RFC 8785 (JCS) bytes of ``value``: sorted keys by UTF-16 units, ES6 number forms."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise CanonicalizationError(str(exc)) from exc


def invocation_digest(*, tenant: str, tool_ref: str, normalized_arguments: Any) -> str:
    """``sha256(tenant ‖ name@version ‖ JCS(arguments))`` as lowercase hex.

    The three parts are joined with NUL bytes, which can occur in neither a tenant slug nor a
    tool reference, so no two different triples can produce the same pre-image.
    """
    h = hashlib.sha256()
    h.update(tenant.encode("utf-8"))
    h.update(b"\x00")
    h.update(tool_ref.encode("utf-8"))
    h.update(b"\x00")
    h.update(canonical_json(normalized_arguments))
    return h.hexdigest()
