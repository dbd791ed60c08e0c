"""Signing outgoing webhooks and spacing their retries: pure functions, no I/O.

Header: ``ToolOps-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``.
The timestamp is inside the signed bytes, so a captured delivery cannot be replayed later
with a fresh ``t``; a receiver accepts a signature only while ``|now - t| <= REPLAY_WINDOW_SECONDS``
and compares digests in constant time. Several ``v1=`` entries may appear (a secret being
rotated); any one matching is enough.
"""
from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "ToolOps-Signature"
REPLAY_WINDOW_SECONDS = 300


def webhook_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The header value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode("utf-8"), str(int(timestamp)).encode("ascii") + b"." + body, hashlib.sha256)
    return f"t={int(timestamp)},v1={mac.hexdigest()}"


def webhook_signature_valid(secret: str, header: str, body: bytes, *, now: float,
                            window: int = REPLAY_WINDOW_SECONDS) -> tuple[bool, str]:
    """``(True, "")`` when ``header`` signs ``body`` with ``secret`` inside the replay window,
    else ``(False, why)``."""
    timestamp, candidates = None, []
    for part in (header or "").split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isdigit():
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        return False, "malformed signature header"
    if abs(now - timestamp) > window:
        return False, "timestamp outside the replay window"
    expected = webhook_signature(secret, timestamp, body).partition(",v1=")[2]
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        return False, "signature does not match"
    return True, ""


def webhook_retry_delay(attempt: int, *, base_seconds: float, max_seconds: float = 3600.0) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based): ``base * 2**(attempt-1)``,
    capped at ``max_seconds``."""
    return min(max_seconds, base_seconds * (2 ** max(0, attempt - 1)))
