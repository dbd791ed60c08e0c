"""The idempotency key a remote sees (docs/concepts/execution.md): derived per tenant, never the runtime's raw key.

Remote key spaces are shared by every tenant of ToolOps, so the raw key (``req-42``) would let
tenant B replay tenant A's effect — or learn that A used the key. The remote key is

    "tk1-" + hex(HMAC-SHA256(secret, json ["toolops.remote-key/1", tenant_id, "name@version", key]))

* **deterministic**: the same (tenant, tool, key) gives the same remote key on every attempt,
  re-send and lookup — the remote's own deduplication keeps working across retries;
* **independent per tenant and tool**: a different tenant id or ``name@version`` gives an
  unrelated key, so two tenants sharing a key cause two effects;
* **keyed (HMAC), not a plain hash**: tenant ids and tool names are not secret and raw keys are
  often guessable (``req-42``), so SHA-256 of the tuple could be recomputed by anyone who can
  talk to the remote directly and used to look another tenant's effect up or pre-empt it. With
  a server-side secret the remote key reveals nothing and cannot be forged.
* the tuple is encoded as a compact JSON array (UTF-8, no whitespace): quoting makes it
  unambiguous, so ``("a|b", "c")`` can never collide with ``("a", "b|c")``.

The derived key is recorded on each attempt, and lookups use the recorded one: a rotated secret
never strands an outcome that is still being reconciled. Stdlib only.
"""
from __future__ import annotations

import hashlib
import hmac
import json

PREFIX = "tk1-"
CONTEXT = "toolops.remote-key/1"


def remote_key(*, secret: bytes, tenant_id: str, tool_ref: str, key: str) -> str:
    """The key to send to the remote for ``key`` of ``tenant_id`` on ``tool_ref`` (68 ASCII chars)."""
    if not secret:
        raise ValueError("the remote-key secret must not be empty")
    for name, value in (("tenant_id", tenant_id), ("tool_ref", tool_ref), ("key", key)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string")
    message = json.dumps([CONTEXT, tenant_id, tool_ref, key], ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return PREFIX + hmac.new(secret, message, hashlib.sha256).hexdigest()
