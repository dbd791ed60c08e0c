"""Reads of imported MCP tools' state, for the hot paths and the dashboard: the gate admission
and the worker check before each call (quarantine, a class nobody confirmed) and the alerts the
console shows. Syncing with the upstream servers (import, refresh, new versions) is the worker's
``worker/upstream_sync.py``; these only read."""
from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Q

from toolops.sql import select_rows
from toolops.model_io.mcp_definitions import QUARANTINED

from specs_app.models import ToolSpec, UpstreamTool


@dataclass(frozen=True)
class UpstreamGate:
    """What admission and the worker must know about an imported tool."""

    quarantined: bool
    state: str
    needs_human: bool  # the side-effect class is not confirmed by an admin

    def sent_as(self, side_effect_class: str) -> str:
        """The class an attempt is sent and judged under: a read-only claim nobody confirmed
        runs as ``write_unsafe``. Its calls wait for a person; once one approved, a lost or
        unusable answer is OUTCOME_UNKNOWN for a person to settle, never a blind re-send of
        what may be a write in disguise."""
        return "write_unsafe" if side_effect_class == "read_only" and self.needs_human else side_effect_class


def upstream_gate(*, spec: ToolSpec) -> UpstreamGate | None:
    """None for tools that are not imported from an MCP server (no query for them). Every
    admission of an imported tool asks, and every attempt the workers send (``worker.attempt.attempt_context``),
    so it is a lean read (``sql.select_rows``; the queryset cost ~1 ms of CPU per call)."""
    if (spec.executor or {}).get("kind") != "mcp":
        return None
    rows = select_rows(UpstreamTool, ["state", "class_confirmed"], "tool_spec_id = %s LIMIT 1", [("tool_spec", spec.pk)])
    if not rows:  # an mcp spec written by hand: nothing watched, nothing confirmed
        return UpstreamGate(quarantined=False, state="unwatched", needs_human=True)
    state, class_confirmed = rows[0]
    return UpstreamGate(quarantined=state in QUARANTINED, state=state, needs_human=class_confirmed != spec.side_effect_class)


def upstream_alerts(*, limit: int = 50, tenants: frozenset[int] | None = None) -> tuple[list[UpstreamTool], list[UpstreamTool]]:
    """In one query: quarantined imported tools (newest detection first), and those whose last
    refresh could not list their server — down, or refused by the egress policy — with the error
    in ``check_error`` (most recently checked first). Retired versions are left out of the latter.
    ``tenants``: only tools those tenants own (before the limit, so other tenants' alerts never
    crowd theirs out); ``None``: all."""
    rows = UpstreamTool.objects.all() if tenants is None else UpstreamTool.objects.filter(tool_spec__tenant_id__in=tenants)
    rows = (rows.filter(Q(state__in=QUARANTINED) | ~Q(check_error=""))
            .exclude(~Q(state__in=QUARANTINED) & Q(tool_spec__status=ToolSpec.Status.RETIRED))
            .select_related("tool_spec").order_by(F("detected_at").desc(nulls_last=True), "-checked_at")[: 2 * limit])
    quarantined = [r for r in rows if r.state in QUARANTINED][:limit]
    unreachable = sorted((r for r in rows if r.state not in QUARANTINED), key=lambda r: r.checked_at, reverse=True)[:limit]
    return quarantined, unreachable
