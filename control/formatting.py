"""Words and numbers for staff pages: argument listings, ages and countdowns, event lines.

Pure functions over data the domain returns; nothing here reads or writes the database.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from invocations_app.models import Event
from worker.support import ACTION_LABELS

HEX_SHOWN_BYTES = 4096


def render_arguments(arguments) -> str:
    """What the approver reads: one ``field: value`` line per top-level argument."""
    if not isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False, indent=2, sort_keys=True)
    lines = []
    for key in sorted(arguments):
        value = arguments[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
        lines.append(f"{key}: {shown}")
    return "\n".join(lines)


def edit_needs_text(needs) -> str:
    """What an approver's edit will need before it runs (``EditRequirement``), for the edit page."""
    fields = ", ".join(dict.fromkeys(p.split("/")[1].replace("~1", "/").replace("~0", "~") for p in needs.changes))
    total = f"{needs.approvals_needed} approvals in all, yours included"
    if needs.second_person and needs.changes:
        return f"This edit changes {fields}: another approver must approve it before it runs ({total})."
    if needs.second_person:
        return f"The approval policy asks a second person for every edit: another approver must approve it before it runs ({total})."
    if needs.approvals_needed > 1:
        return (f"This edit only narrows numbers, but the call needs {total}: "
                f"{needs.approvals_needed - 1} more person(s) must approve it before it runs.")
    return "This edit only narrows numbers: your approval releases it."


def pretty(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def pretty_text(text: str) -> str:
    """A stored JSON text pretty-printed, or the text itself when it is not JSON."""
    if not text:
        return ""
    try:
        return pretty(json.loads(text))
    except ValueError:
        return text


def age(since: datetime | None, now: datetime | None = None) -> str:
    """``3 h 05 min`` / ``12 min`` / ``40 s``: how long ago ``since`` was."""
    if since is None:
        return ""
    seconds = max(0, int(((now or timezone.now()) - since).total_seconds()))
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min" if minutes else f"{seconds} s"


def time_left(expires_at: datetime, now: datetime) -> str:
    """``14 min 05 s`` / ``expired``: the countdown text the page starts from."""
    seconds = int((expires_at - now).total_seconds())
    if seconds <= 0:
        return "expired"
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"


@dataclass(frozen=True)
class Bytes:
    """Bytes shown three ways: escaped text (invalid UTF-8 as \\x..), hex, and their SHA-256."""

    raw: bytes

    @property
    def length(self) -> int:
        return len(self.raw)

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "backslashreplace")

    @property
    def hex(self) -> str:
        return self.raw[:HEX_SHOWN_BYTES].hex(" ")

    @property
    def hex_truncated(self) -> bool:
        return len(self.raw) > HEX_SHOWN_BYTES

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()


def who(actor: str) -> str:
    return actor.removeprefix("user:") if actor else "system"


def lookup_answer_text(committed: bool | None, detail: dict | None, external_resource_id: str | None = None) -> str:
    """How the console states a lookup's answer."""
    if committed is True:
        return f"committed — the tool has it{f' as {external_resource_id}' if external_resource_id else ''}"
    if committed is False:
        return "not committed — the tool proves it never took effect"
    why = (detail or {}).get("reason") or (detail or {}).get("error") or (
        f"HTTP {(detail or {})['status']}" if (detail or {}).get("status") else "no answer"
    )
    return f"unknown — {why}"


def describe_event(event: Event) -> str:
    """One line of reconciliation history, in words."""
    d = event.data or {}
    kind = event.kind
    reason = f" — “{d['reason']}”" if d.get("reason") else ""
    if kind == "outcome_unknown":
        message = (d.get("error") or {}).get("message") or (d.get("error") or {}).get("code") or "no answer from the tool"
        return f"became OUTCOME_UNKNOWN: {message}"
    if kind == "attempt_abandoned":
        return f"attempt {d.get('attempt')} abandoned by its worker" + (" after the request was sent" if d.get("sent") else "")
    if kind == "reconciliation_lookup":
        return "automatic look-up: " + lookup_answer_text(d.get("committed"), d.get("detail"), d.get("external_resource_id"))
    if kind == "support_lookup":
        return "look up now: " + lookup_answer_text(d.get("committed"), d.get("detail"), d.get("external_resource_id")) + reason
    if kind == "support_resend":
        return f"re-sent with the same key {d.get('idempotency_key', '')}{reason}"
    label = ACTION_LABELS.get(d.get("action", ""), d.get("action", ""))
    if kind == "resolution_proposed":
        ext = f" ({d['external_resource_id']})" if d.get("external_resource_id") else ""
        return f"proposed “{label}”{ext}, evidence: {d.get('evidence', '')}{reason} — awaiting a second person"
    if kind == "resolution_confirmed":
        return f"confirmed the proposal of {d.get('proposed_by', '?')} (#{d.get('proposal_seq')}){reason}"
    if kind == "resolution_rejected":
        return f"rejected the proposal of {d.get('proposed_by', '?')} (#{d.get('proposal_seq')}){reason}"
    if kind == "resolution_applied":
        ext = f" ({d['external_resource_id']})" if d.get("external_resource_id") else ""
        return f"{label}{ext}, evidence: {d.get('evidence', '')}{reason}"
    if kind == "resolved_committed":
        tail = "" if d.get("run_live") else " (run ended: no tool message)"
        return f"→ COMMITTED as {d.get('external_resource_id', '')}{tail}"
    if kind == "resolved_not_committed":
        tail = " with a tool message" if d.get("run_live") else " (run ended: no tool message)"
        return f"→ FAILED_BEFORE_COMMIT{tail}"
    return kind


def history_lines(events: list[Event]) -> list[dict]:
    return [{"seq": e.seq, "at": e.at, "who": who(e.actor), "kind": e.kind, "text": describe_event(e)} for e in events]
