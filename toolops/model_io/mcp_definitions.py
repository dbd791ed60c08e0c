"""Upstream MCP tool definitions: pinning, proposed side-effect classes, drift (pure).

ToolOps governs an existing MCP server by importing its ``tools/list`` as draft ToolSpecs. What
an upstream says about its tools is a *claim*, so:

* **Pin** — each ToolSpec pins the SHA-256 of the RFC 8785 canonical form of the governed part
  of its upstream definition (name, title, description, input/output schema, annotations).
  ``_meta``, icons and execution hints are left out: they do not change what the tool does or
  what the model is told.
* **Pessimistic class** — annotations are untrusted hints. MCP's own defaults are the
  pessimistic ones (``readOnlyHint`` false, ``destructiveHint`` true, ``idempotentHint``
  false), and a missing hint takes its default: no ``readOnlyHint: true`` → a write, no
  ``idempotentHint: true`` → ``write_unsafe``. The result is a *proposal* for an admin.
* **Drift** — a refreshed definition is compared with the pin; the watch state moves by
  ``WATCH_TRANSITIONS`` (a change is sticky: it ends only with a new version, never because
  the upstream changed back — nor by vanishing first and then listing the pinned definition
  again, so a changed tool that disappears stays CHANGED, its evidence kept).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Mapping

from toolops.runtime.digest import canonical_json

IDEMPOTENCY_META_KEY = "dev.toolops/idempotencyKey"
TRACEPARENT_META_KEY = "traceparent"
GOVERNED_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")

# MCP's documented defaults for absent hints (schema.ts, ToolAnnotations).
HINT_DEFAULTS = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True}


class Watch:
    """Watch states of an imported tool (``UpstreamTool.state``)."""

    PINNED = "pinned"  # the upstream advertises exactly the pinned definition
    CHANGED = "changed"  # the definition differs from the pin: quarantined
    MISSING = "missing"  # the upstream no longer lists the tool (or cannot be reached for it): quarantined


WATCH_STATES = (Watch.PINNED, Watch.CHANGED, Watch.MISSING)
WATCH_TRANSITIONS = frozenset({
    (Watch.PINNED, Watch.CHANGED), (Watch.PINNED, Watch.MISSING),
    (Watch.MISSING, Watch.CHANGED),
    (Watch.MISSING, Watch.PINNED),  # listed again, byte for byte the pinned definition
    (Watch.CHANGED, Watch.CHANGED),  # changed again: the newest observation is kept
    # No (CHANGED, MISSING): changed → missing → pinned would lift a rug pull without an admin.
})
QUARANTINED = frozenset({Watch.CHANGED, Watch.MISSING})


def governed_definition(tool: Mapping[str, Any]) -> dict:
    """The part of an MCP ``Tool`` (wire form, camelCase) that is pinned; absent fields drop out."""
    return {k: tool[k] for k in GOVERNED_FIELDS if tool.get(k) is not None}


def definition_sha256(tool: Mapping[str, Any]) -> str:
    """SHA-256 hex of the RFC 8785 canonical form of the governed definition; ``Unpinnable``
    when it has none (an integer beyond ±2**53, a NaN — RFC 8785 numbers are IEEE doubles)."""
    try:
        return hashlib.sha256(canonical_json(governed_definition(tool))).hexdigest()
    except ValueError as exc:
        raise Unpinnable(f"the definition has no RFC 8785 canonical form: {exc}") from None


class Unpinnable(ValueError):
    """An upstream definition that cannot be pinned (so it never matches a pin)."""


def observed_sha256(tool: Mapping[str, Any]) -> str:
    """``definition_sha256``, or "" for a definition that cannot be pinned: it differs from
    every pin, since each pin was computed from one that could."""
    try:
        return definition_sha256(tool)
    except Unpinnable:
        return ""


@dataclass(frozen=True)
class ClassProposal:
    side_effect_class: str
    confirmation_required: bool
    operation_class: str  # read / create / delete, for the imported capability
    reasons: tuple[str, ...]


def proposed_class(annotations: Mapping[str, Any] | None) -> ClassProposal:
    """What the hints suggest, read pessimistically (only a literal ``true`` counts as a claim)."""
    given = dict(annotations or {})
    hints = {**HINT_DEFAULTS, **{k: v for k, v in given.items() if k in HINT_DEFAULTS}}
    reasons = [f"{k}={'true' if hints[k] is True else 'false'}" + ("" if k in given else " (absent: MCP default)")
               for k in ("readOnlyHint", "destructiveHint", "idempotentHint")]
    if hints["readOnlyHint"] is True:
        return ClassProposal("read_only", False, "read", tuple(reasons + ["read_only is a claim: an admin must confirm it"]))
    destructive = hints["destructiveHint"] is not False
    cls = "write_idempotent" if hints["idempotentHint"] is True else "write_unsafe"
    return ClassProposal(cls, destructive, "delete" if destructive else "create", tuple(reasons))


def definition_diff(pinned: Mapping[str, Any], observed: Mapping[str, Any] | None) -> list[dict]:
    """Governed fields that differ: ``[{"field", "pinned", "observed"}]`` (the whole tool when gone)."""
    if observed is None:
        return [{"field": "(tool)", "pinned": "listed", "observed": "no longer listed"}]
    a, b = governed_definition(pinned), governed_definition(observed)
    return [{"field": f, "pinned": a.get(f), "observed": b.get(f)} for f in GOVERNED_FIELDS
            if canonical_json(a.get(f)) != canonical_json(b.get(f))]


def watch_next(*, state: str, pinned_sha256: str, observed: Mapping[str, Any] | None) -> str:
    """The watch state after one refresh; ``observed`` is None when the tool is not listed."""
    if observed is None:
        target = Watch.MISSING
    elif observed_sha256(observed) != pinned_sha256:
        target = Watch.CHANGED
    else:
        target = Watch.PINNED
    if state == Watch.CHANGED and target != Watch.CHANGED:
        return Watch.CHANGED  # sticky: changing back (or vanishing) does not undo a rug pull somebody may have seen
    if target == state or (state, target) in WATCH_TRANSITIONS:
        return target
    return state


_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def toolops_name(prefix: str, upstream_name: str) -> str:
    """The ToolSpec name of an upstream tool: ``prefix.`` + its dotted parts, each made an
    identifier (``notes.create`` → ``team.notes.create``; ``get-item`` → ``get_item``)."""
    parts = []
    for part in upstream_name.split("."):
        part = _UNSAFE.sub("_", part) or "_"
        parts.append(part if part[0].isalpha() else f"t{part}")
    return ".".join([prefix, *parts])


def upstream_meta(*, idempotency_key: str | None, traceparent: str | None) -> dict:
    """The ``_meta`` of an outbound ``tools/call``: the (derived) key and the attempt's trace."""
    meta = {}
    if idempotency_key:
        meta[IDEMPOTENCY_META_KEY] = idempotency_key
    if traceparent:
        meta[TRACEPARENT_META_KEY] = traceparent
    return meta


def result_value(*, structured: Any, content: list[dict]) -> tuple[Any, tuple[str, ...]]:
    """A ``CallToolResult``'s value and the pointers of its untrusted text.

    ``structuredContent`` is the value when present (its strings are the tool's data, marked
    untrusted like any external text would be by the ToolSpec's result policy); otherwise the
    content blocks are, and every text block is marked untrusted.
    """
    if structured is not None:
        return structured, ()
    blocks = [b for b in content if isinstance(b, dict)]
    pointers = tuple(f"/content/{i}/text" for i, b in enumerate(blocks) if b.get("type") == "text")
    return {"content": blocks}, pointers
