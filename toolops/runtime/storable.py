"""What PostgreSQL can hold: text without a NUL and encodable as UTF-8 (no lone surrogate), JSON
with finite numbers. A client's value that reaches a text or jsonb column — written, or compared
in a lookup — is checked with these first, so it is refused in ToolOps' words (or recorded in a
form the column can hold) instead of failing inside the database."""
from __future__ import annotations

import math
import re

_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")  # a NUL, or a lone surrogate


def text_problem(text: str) -> str | None:
    """Why a text column cannot hold ``text``; None when it can."""
    if "\x00" in text:
        return "NUL character"
    if _UNSTORABLE.search(text):
        return "lone surrogate"
    return None


def storable_text(text: str, *, max_chars: int) -> str:
    """``text`` as a column can hold it: each NUL and lone surrogate replaced by U+FFFD, cut to
    ``max_chars`` (for what a record keeps of a client's own label, e.g. its request id)."""
    return _UNSTORABLE.sub("\ufffd", text[:max_chars])


def printable(text: str) -> str:
    """Client text safe to quote in an error: escapes instead of NULs and surrogates, short."""
    return text.encode("unicode_escape").decode("ascii")[:40]


def json_safe_problems(value, path: str = "$") -> list[str]:
    """Why ``value`` cannot be stored and echoed as JSON by every database and client: a NUL
    (PostgreSQL's jsonb refuses it), a lone surrogate (not encodable as UTF-8) in a key or a
    string, or a non-finite number (1e400 parses as infinity)."""
    if isinstance(value, str):
        problem = text_problem(value)
        return [f"{path}: {problem}"] if problem else []
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{path}: non-finite number"]
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            label = f"{path}.{printable(key)}"
            if json_safe_problems(key):
                found.append(f"{label}: key with a NUL or a lone surrogate")
            found += json_safe_problems(item, label)
        return found
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in json_safe_problems(item, f"{path}[{i}]")]
    return []
