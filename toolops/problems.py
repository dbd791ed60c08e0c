"""RFC 9457 problem documents: one body shape for the DRF handler and the /api/ middleware."""
from __future__ import annotations

import re
from typing import Any

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "https://toolops.dev/problems/"

_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def encodable(value: Any) -> Any:
    """The value with every lone surrogate replaced by U+FFFD: an error may echo client text
    (a field name, a bad value) and must still encode as UTF-8 — a 400 must never become a 500."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encodable(v) for v in value]
    return value


def problem_body(status: int, code: str, title: str, detail: str, **extra: Any) -> dict:
    body = {"type": PROBLEM_TYPE_BASE + code, "title": title, "status": status, "code": code, "detail": detail}
    body.update(extra)
    return encodable(body)
