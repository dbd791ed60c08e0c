"""Audit the recorded history against docs/concepts/lifecycle.md's invariants (``manage.py audit_invariants``).

The transition service and the database triggers stop forbidden writes as they happen; this
module re-reads what is *stored* and reports what should never be there, whoever wrote it
(a bug, a manual SQL fix, a restored backup, a future migration). It only reads.

Kinds of violation (one ``Violation`` per kind and invocation; the detail names the events):

``edge_not_in_table``
    Two consecutive events of an invocation whose ``from_state → to_state`` is not an edge of
    the table (the first event must be ``∅ → PROPOSED``), an event whose ``from_state`` is
    not the state the previous event left the invocation in, or an invocation whose ``state``
    column is not where its log ends. An event with ``from_state == to_state`` is a decision
    or a detail, not a transition, and is fine.
``executed_without_authorization``
    The log reaches EXECUTING but the recorded authorization decision is neither ``allow``
    nor ``confirm``; or it is ``confirm`` and no *approved* confirmation carries the
    invocation's digest (or the only matching approval was decided after execution began).
``confirmation_digest_mismatch``
    An approved confirmation whose digest is not its invocation's digest (docs/concepts/confirmation.md).
``committed_then_not_happened``
    The log has a COMMITTED event, but a later event, the current state or ``commit_status``
    says the call did not happen (docs/concepts/lifecycle.md invariant 5).
``digest_not_reproducible``
    For an invocation whose log reached VALIDATED: re-admitting the stored proposal bytes with
    the stored normalization context, parser limits and the invocation's ToolSpec does not end
    VALIDATED with the stored digest, or the stored ``normalized_arguments`` do not hash to it
    (docs/concepts/lifecycle.md invariant 3). Records written by another normalizers/parser version cannot be
    re-run by this code: they are counted as *unverifiable*, not reported as violations.
``events_after_terminal``
    Any event after the first event that entered a terminal state (docs/concepts/failures.md last row).
``seq_gap``
    Event seqs of an invocation are not exactly 1..n, or ``Invocation.event_seq`` is not n.
``tool_not_visible``
    An invocation of a ToolSpec that its model call was not shown (no ``ModelCallTool`` of that
    model call for that ToolSpec), or whose recorded ``name@version`` or proposed name is not
    exactly that tool's in the visible set (docs/concepts/lifecycle.md invariant 2: no fuzzy or "latest" match).
``tool_of_another_tenant``
    An invocation of a ToolSpec owned by a tenant other than the invocation's (global ToolSpecs
    belong to every tenant): a tenant's tool is listed, granted and run only inside it.
``executed_beyond_grants``
    The log reaches EXECUTING, but some capability the ToolSpec requires for these normalized
    arguments was not covered by a grant valid at the recorded decision time (docs/concepts/lifecycle.md
    invariant 4): the authorization record names no grant for it; the grant row is gone or
    differs from the recorded snapshot (capability, tenant, subject, scope, effect, pinned
    versions); it was created after, or revoked at or before, the decision; or the recorded
    snapshot itself does not cover the call at that time (operation class, expiry, pinned
    version, scope, per-call amount and time-range limits, re-checked by the runtime's own
    ``grant_failures`` / ``limit_failures``). Counting limits (rate, per run, amount window)
    depend on other calls and are not re-derived here.

Scale: invocations are read in ``(created_at, id)`` order by keyset pages of ``chunk_size``
rows; each page's events and confirmations are fetched with it (``IN`` lists of at most
``IN_BATCH`` ids), so memory is bounded by one page whatever the table size, and no cursor stays
open between pages. Outside a caller's transaction each page is read in one transaction
(REPEATABLE READ, READ ONLY on PostgreSQL; on SQLite the backend's ``BEGIN IMMEDIATE``, which
holds writers back for the few milliseconds a page takes to read), so a row and its events are
seen at the same instant even while workers keep writing; the checks themselves run outside it.
An invocation committed during the scan with a ``created_at`` behind the scan position is left
for the next run.

``since`` bounds the scan by ``Invocation.created_at``: an invocation created at or after it
is checked whole (all its events and confirmations, however late they were written); older
invocations are not read at all.
"""
from __future__ import annotations

import contextlib
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, time, timedelta
from typing import Any, Callable, Iterable, Iterator

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, DateTimeField, F, Q, When
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from specs_app.models import Grant, ToolSpec
from specs_app.selectors import capability_classes, tool_view
from toolops.sql import pk_from_text
from toolops.runtime.admission import ToolView, admit
from toolops.decisions.authorization import AuthContext, GrantSnapshot, Usage, grant_failures, limit_failures
from toolops.runtime.digest import invocation_digest
from toolops.runtime.normalizers import NORMALIZERS_VERSION, NormalizationContext
from toolops.runtime.parser import PARSER_VERSION, ParserLimits
from toolops.decisions.requirements import RequirementError, requirements_for
from toolops.runtime.states import AT_OR_AFTER_COMMIT, TERMINAL, State, is_allowed

from invocations_app.models import Confirmation, Event, Invocation, ModelCallTool

EDGE_NOT_IN_TABLE = "edge_not_in_table"
EXECUTED_WITHOUT_AUTHORIZATION = "executed_without_authorization"
CONFIRMATION_DIGEST_MISMATCH = "confirmation_digest_mismatch"
COMMITTED_THEN_NOT_HAPPENED = "committed_then_not_happened"
DIGEST_NOT_REPRODUCIBLE = "digest_not_reproducible"
EVENTS_AFTER_TERMINAL = "events_after_terminal"
SEQ_GAP = "seq_gap"
TOOL_NOT_VISIBLE = "tool_not_visible"
TOOL_OF_ANOTHER_TENANT = "tool_of_another_tenant"
EXECUTED_BEYOND_GRANTS = "executed_beyond_grants"

KINDS: tuple[str, ...] = (
    EDGE_NOT_IN_TABLE,
    EXECUTED_WITHOUT_AUTHORIZATION,
    CONFIRMATION_DIGEST_MISMATCH,
    COMMITTED_THEN_NOT_HAPPENED,
    DIGEST_NOT_REPRODUCIBLE,
    EVENTS_AFTER_TERMINAL,
    SEQ_GAP,
    TOOL_NOT_VISIBLE,
    TOOL_OF_ANOTHER_TENANT,
    EXECUTED_BEYOND_GRANTS,
)

DEFAULT_CHUNK_SIZE = 1000
IN_BATCH = 500  # ids per IN (...) list: well under every backend's bound-parameter limit
_SHOWN = 3  # offending events named in one detail

_STATES = frozenset(s.value for s in State)
_TERMINAL = frozenset(s.value for s in TERMINAL)
_AT_OR_AFTER_COMMIT = frozenset(s.value for s in AT_OR_AFTER_COMMIT)


@dataclass(frozen=True)
class Violation:
    kind: str
    invocation_id: str
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class EventRow:
    seq: int
    from_state: str
    to_state: str
    kind: str
    at: datetime | None  # loaded for events entering EXECUTING only (see invocation_pages)


@dataclass(frozen=True)
class VisibleTool:
    tool_spec_id: int
    model_facing_name: str
    tool_ref: str


@dataclass(frozen=True)
class ConfirmationRow:
    id: str
    state: str
    digest: str
    decided_at: datetime | None


@dataclass
class InvocationRecord:
    """What the checks see of one invocation: the row, its log in seq order, its confirmations."""

    id: str
    state: str
    event_seq: int
    digest: str
    commit_status: str
    authorization: Any
    created_at: datetime | None = None
    tool_spec_id: int | None = None
    tenant_slug: str = ""
    normalization_context: Any = None
    normalized_arguments: Any = None
    arguments_bytes: bytes | None = None
    parser: Any = None
    null_as_absent: Any = None  # validation.strict_rendering.null_as_absent, if admission mapped nulls
    subject_id: str = ""
    tenant_id: int | None = None
    tool_tenant_id: int | None = None  # the ToolSpec's owner; None: a global tool
    tool_ref: str = ""  # tool_name@tool_version as recorded on the invocation
    proposal_name: str = ""
    visible: list[VisibleTool] | None = None  # the model call's visible set; None when not loaded
    events: list[EventRow] = field(default_factory=list)
    confirmations: list[ConfirmationRow] = field(default_factory=list)


# --- the checks, one invocation at a time (pure) ---------------------------------------------

def _listing(problems: list[str]) -> str:
    shown = "; ".join(problems[:_SHOWN])
    return shown + (f"; … {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else "")


def _st(state: str) -> str:
    return state or "∅"


def _edge_ok(src: str, dst: str) -> bool:
    return (src == "" and dst == State.PROPOSED) or is_allowed(src, dst)


def check_edges(rec: InvocationRecord) -> Iterator[Violation]:
    problems: list[str] = []
    previous = ""
    for ev in rec.events:
        if ev.from_state != previous:
            problems.append(f"event #{ev.seq} ({ev.kind}) starts from {_st(ev.from_state)} but the log was in {_st(previous)}")
        if ev.from_state == ev.to_state:
            if ev.to_state not in _STATES:
                problems.append(f"event #{ev.seq} ({ev.kind}) names no state of the lifecycle: {ev.to_state!r}")
        elif not _edge_ok(ev.from_state, ev.to_state):
            problems.append(f"event #{ev.seq} ({ev.kind}) {_st(ev.from_state)} → {_st(ev.to_state)} "
                            "is not an edge of the state table")
        previous = ev.to_state
    if rec.state != previous:
        problems.append(f"the invocation is {rec.state} but its event log ends in {_st(previous)}")
    if problems:
        yield Violation(EDGE_NOT_IN_TABLE, rec.id, _listing(problems))


def check_execution_authorized(rec: InvocationRecord) -> Iterator[Violation]:
    started = next((ev for ev in rec.events if ev.to_state == State.EXECUTING), None)
    if started is None:
        return
    auth = rec.authorization if isinstance(rec.authorization, dict) else {}
    decision = auth.get("decision")
    where = f"EXECUTING at event #{started.seq}"
    if decision not in ("allow", "confirm"):
        yield Violation(EXECUTED_WITHOUT_AUTHORIZATION, rec.id, f"{where} but the authorization decision is {decision!r}")
        return
    if decision != "confirm":
        return
    approved = [c for c in rec.confirmations if c.state == Confirmation.Status.APPROVED]
    matching = [c for c in approved if c.digest == rec.digest]
    if not matching:
        others = f" (approved digests: {', '.join(c.digest for c in approved)})" if approved else ""
        yield Violation(
            EXECUTED_WITHOUT_AUTHORIZATION, rec.id,
            f"{where}; the decision was 'confirm' but no approved confirmation has digest {rec.digest}{others}",
        )
        return
    if started.at is not None and all(c.decided_at is not None and c.decided_at > started.at for c in matching):
        first = min(c.decided_at for c in matching)
        yield Violation(
            EXECUTED_WITHOUT_AUTHORIZATION, rec.id,
            f"{where} ({started.at.isoformat()}) before its confirmation was approved ({first.isoformat()})",
        )


def check_confirmation_digests(rec: InvocationRecord) -> Iterator[Violation]:
    bad = [c for c in rec.confirmations if c.state == Confirmation.Status.APPROVED and c.digest != rec.digest]
    if bad:
        yield Violation(CONFIRMATION_DIGEST_MISMATCH, rec.id, _listing([
            f"approved confirmation {c.id} has digest {c.digest}, the invocation {rec.digest or '∅'}" for c in bad
        ]))


def check_commit_stands(rec: InvocationRecord) -> Iterator[Violation]:
    committed = next((ev for ev in rec.events if ev.to_state == State.COMMITTED), None)
    if committed is None:
        return
    problems = [
        f"event #{ev.seq} ({ev.kind}) moves to {_st(ev.to_state)} after COMMITTED (event #{committed.seq})"
        for ev in rec.events if ev.seq > committed.seq and ev.to_state not in _AT_OR_AFTER_COMMIT
    ]
    if rec.state not in _AT_OR_AFTER_COMMIT:
        problems.append(f"the invocation is now {rec.state} although event #{committed.seq} is COMMITTED")
    if rec.commit_status != "committed":
        problems.append(f"commit_status is {rec.commit_status or '∅'} although event #{committed.seq} is COMMITTED")
    if problems:
        yield Violation(COMMITTED_THEN_NOT_HAPPENED, rec.id, _listing(problems))


def check_after_terminal(rec: InvocationRecord) -> Iterator[Violation]:
    for index, ev in enumerate(rec.events):
        if ev.to_state in _TERMINAL:
            later = rec.events[index + 1:]
            if later:
                yield Violation(EVENTS_AFTER_TERMINAL, rec.id, _listing([
                    f"{len(later)} event(s) after {ev.to_state} (event #{ev.seq})",
                    *(f"event #{e.seq} ({e.kind}) {_st(e.from_state)} → {_st(e.to_state)}" for e in later),
                ]))
            return


def check_seqs(rec: InvocationRecord) -> Iterator[Violation]:
    seqs = [ev.seq for ev in rec.events]
    problems = []
    if seqs != list(range(1, len(seqs) + 1)):
        present = set(seqs)
        missing = [n for n in range(1, max(seqs) + 1) if n not in present]
        odd = [n for n in seqs if n < 1]
        problems.append(
            f"event seqs are not 1..{len(seqs)}"
            + (f"; missing {missing[:10]}{'…' if len(missing) > 10 else ''}" if missing else "")
            + (f"; invalid {odd[:10]}" if odd else "")
        )
    last = max(seqs) if seqs else 0
    if rec.event_seq != last:
        problems.append(f"invocation.event_seq is {rec.event_seq} but the last event is #{last}")
    if problems:
        yield Violation(SEQ_GAP, rec.id, "; ".join(problems))


class DigestReproducer:
    """Re-runs admission on the stored inputs; caches tool views and counts what it cannot re-run."""

    def __init__(self, stats: Counter | None = None):
        self.stats = stats if stats is not None else Counter()
        self._views: dict[int, ToolView | None] = {}

    def _view(self, spec_id: int) -> ToolView | None:
        if spec_id not in self._views:
            spec = ToolSpec.objects.filter(pk=spec_id).first()
            self._views[spec_id] = tool_view(spec) if spec else None
        return self._views[spec_id]

    def __call__(self, rec: InvocationRecord) -> Iterator[Violation]:
        if not any(ev.to_state == State.VALIDATED for ev in rec.events):
            return
        self.stats["digests_checked"] += 1
        fail = lambda detail: Violation(DIGEST_NOT_REPRODUCIBLE, rec.id, detail)  # noqa: E731
        view = self._view(rec.tool_spec_id) if rec.tool_spec_id is not None else None
        if view is None:
            yield fail("the invocation reached VALIDATED but names no ToolSpec")
            return
        context_record = rec.normalization_context if isinstance(rec.normalization_context, dict) else {}
        parser = rec.parser if isinstance(rec.parser, dict) else {}
        recorded_versions = (context_record.get("normalizers_version"), parser.get("version"))
        if recorded_versions[0] not in (None, NORMALIZERS_VERSION) or recorded_versions[1] not in (None, PARSER_VERSION):
            self.stats["digests_unverifiable"] += 1  # recorded by other code: re-running it here proves nothing
            return
        try:
            context = NormalizationContext.from_record(context_record)
        except (ValueError, TypeError, KeyError) as exc:
            yield fail(f"the stored normalization context cannot be rebuilt: {exc}")
            return
        if isinstance(rec.null_as_absent, list) and rec.null_as_absent:
            # The call saw a strict rendering: admission removed these nulls; so does the re-run.
            view = replace(view, null_as_absent=tuple(str(p) for p in rec.null_as_absent))
        try:
            plan = admit(
                arguments_bytes=bytes(rec.arguments_bytes or b""), tool=view, visible_names=[], tenant=rec.tenant_slug,
                context=context, limits=_limits(parser),
            )
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, not a reason to stop the audit
            yield fail(f"re-admitting the stored proposal raised {type(exc).__name__}: {exc}")
            return
        if plan.final_state != State.VALIDATED:
            yield fail(f"re-admitting the stored proposal bytes now ends {plan.final_state}: {(plan.error or {}).get('message')}")
        elif plan.digest != rec.digest:
            yield fail(f"re-admission under the stored context gives digest {plan.digest}, stored {rec.digest or '∅'}")
        else:
            try:
                stored = invocation_digest(tenant=rec.tenant_slug, tool_ref=view.ref, normalized_arguments=rec.normalized_arguments)
            except ValueError as exc:
                yield fail(f"the stored normalized_arguments cannot be canonicalized: {exc}")
                return
            if stored != rec.digest:
                yield fail(f"the stored normalized_arguments hash to {stored}, not to the stored digest {rec.digest}")


def check_tool_visible(rec: InvocationRecord) -> Iterator[Violation]:
    if rec.tool_spec_id is None or rec.visible is None:
        return  # an unknown-tool rejection names no tool; nothing was looked up
    shown = [v for v in rec.visible if v.tool_spec_id == rec.tool_spec_id]
    if not shown:
        refs = ", ".join(sorted(v.tool_ref for v in rec.visible)) or "nothing"
        yield Violation(TOOL_NOT_VISIBLE, rec.id, f"{rec.tool_ref or rec.tool_spec_id} was not in its model call's visible set ({refs})")
        return
    tool = shown[0]
    problems = []
    if rec.tool_ref != tool.tool_ref:
        problems.append(f"the invocation records {rec.tool_ref or '∅'}, the model call showed {tool.tool_ref}")
    if rec.proposal_name not in (tool.model_facing_name, tool.tool_ref):
        problems.append(f"the proposal named {rec.proposal_name!r}, not {tool.model_facing_name!r} or {tool.tool_ref!r}")
    if problems:
        yield Violation(TOOL_NOT_VISIBLE, rec.id, "; ".join(problems))


def check_tool_tenant(rec: InvocationRecord) -> Iterator[Violation]:
    if rec.tool_tenant_id is not None and rec.tool_tenant_id != rec.tenant_id:
        yield Violation(TOOL_OF_ANOTHER_TENANT, rec.id,
                        f"{rec.tool_ref or rec.tool_spec_id} is owned by tenant #{rec.tool_tenant_id}, the call belongs to tenant #{rec.tenant_id}")


def _aware(value: Any) -> datetime | None:
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None


class GrantCoverage:
    """Invariant 4 for executed calls: each required capability covered by a grant valid then.

    Caches ToolSpecs and grant rows (both few compared with invocations; grants are read by id).
    """

    def __init__(self) -> None:
        self._specs: dict[int, ToolSpec | None] = {}
        self._grants: dict[str, dict | None] = {}

    def _spec(self, spec_id: int) -> ToolSpec | None:
        if spec_id not in self._specs:
            self._specs[spec_id] = ToolSpec.objects.filter(pk=spec_id).first()
        return self._specs[spec_id]

    def _grant(self, grant_id: str) -> dict | None:
        if grant_id not in self._grants:
            try:
                uuid_ok = pk_from_text(Grant, grant_id)
            except Exception:  # noqa: BLE001 - a malformed id in a record is a finding, reported below
                uuid_ok = None
            self._grants[grant_id] = None if uuid_ok is None else Grant.objects.filter(pk=uuid_ok).values(
                "capability__name", "tenant__slug", "subject_id", "scope_kind", "scope_values", "effect", "tool_refs",
                "created_at", "revoked_at",
            ).first()
        return self._grants[grant_id]

    def __call__(self, rec: InvocationRecord) -> Iterator[Violation]:
        started = next((ev for ev in rec.events if ev.to_state == State.EXECUTING), None)
        if started is None:
            return
        fail = lambda detail: Violation(EXECUTED_BEYOND_GRANTS, rec.id, detail)  # noqa: E731
        auth = rec.authorization if isinstance(rec.authorization, dict) else {}
        spec = self._spec(rec.tool_spec_id) if rec.tool_spec_id is not None else None
        decided_at = _aware(auth.get("decided_at"))
        if spec is None or decided_at is None:
            yield fail(f"EXECUTING at event #{started.seq}, but the record names no ToolSpec or no decision time")
            return
        declared = list(spec.required_capabilities or [])
        try:
            requirements = requirements_for(
                declared=declared, operation_classes=capability_classes([d["capability"] for d in declared]),
                arguments=rec.normalized_arguments, normalizers=spec.normalizers,
            )
        except (RequirementError, KeyError, TypeError) as exc:
            yield fail(f"the requirements of these arguments cannot be derived: {exc}")
            return
        if not requirements:
            yield fail(f"EXECUTING at event #{started.seq}, but {spec.ref} requires no capability, so no grant covered it")
            return
        snapshots: list[GrantSnapshot] = []
        for raw in auth.get("capabilities") or []:
            try:
                snapshots.append(GrantSnapshot.from_dict(raw))
            except (KeyError, TypeError, ValueError) as exc:
                yield fail(f"a recorded grant snapshot is unreadable: {exc}")
                return
        ctx = AuthContext(tenant=rec.tenant_slug, subject_id=rec.subject_id, tool_ref=spec.ref, now=decided_at)
        problems = []
        for req in requirements:
            used = [g for g in snapshots if g.capability == req.capability]
            if not used:
                problems.append(f"no grant of {req.capability} is recorded for the call")
                continue
            problems += [f"{req.capability}: {p}" for p in self._grant_problems(used[0], req, ctx)]
        if problems:
            yield fail(_listing(problems))

    def _grant_problems(self, snap: GrantSnapshot, req, ctx: AuthContext) -> list[str]:
        row = self._grant(snap.grant_id)
        if row is None:
            return [f"grant {snap.grant_id} does not exist"]
        problems = []
        stored = {
            "capability": row["capability__name"], "tenant": row["tenant__slug"],
            "subject_id": str(row["subject_id"]) if row["subject_id"] is not None else None,
            "scope_kind": row["scope_kind"], "scope_values": tuple(row["scope_values"] or ()), "effect": row["effect"],
            "tool_refs": tuple(row["tool_refs"] or ()),
        }
        recorded = {k: getattr(snap, k) for k in stored}
        changed = sorted(k for k in stored if stored[k] != recorded[k])
        if changed:
            problems.append(f"grant {snap.grant_id} differs from the recorded snapshot in {', '.join(changed)}")
        if row["created_at"] > ctx.now:
            problems.append(f"grant {snap.grant_id} was created after the decision ({row['created_at'].isoformat()})")
        if row["revoked_at"] is not None and row["revoked_at"] <= ctx.now:
            problems.append(f"grant {snap.grant_id} was revoked at {row['revoked_at'].isoformat()}, before the decision")
        # The snapshot as it stood at decision time, re-judged by the runtime's own rules.
        as_then = replace(snap, revoked_at=None) if snap.revoked_at is None or snap.revoked_at > ctx.now else snap
        failures = grant_failures(as_then, req, ctx) + limit_failures(as_then.limits, req, Usage(), ctx.now)
        problems += [f"grant {snap.grant_id}: {message} ({code})" for code, message in failures]
        return problems


def _limits(parser: dict) -> ParserLimits:
    """The limits the proposal was parsed under (admission succeeded under them)."""
    try:
        return ParserLimits(max_bytes=int(parser["max_bytes"]), max_depth=int(parser["max_depth"]))
    except (KeyError, TypeError, ValueError):
        return ParserLimits(max_bytes=settings.TOOLOPS_PARSER_MAX_BYTES, max_depth=settings.TOOLOPS_PARSER_MAX_DEPTH)


_SIMPLE_CHECKS: dict[str, Callable[[InvocationRecord], Iterable[Violation]]] = {
    EDGE_NOT_IN_TABLE: check_edges,
    EXECUTED_WITHOUT_AUTHORIZATION: check_execution_authorized,
    CONFIRMATION_DIGEST_MISMATCH: check_confirmation_digests,
    COMMITTED_THEN_NOT_HAPPENED: check_commit_stands,
    EVENTS_AFTER_TERMINAL: check_after_terminal,
    SEQ_GAP: check_seqs,
    TOOL_NOT_VISIBLE: check_tool_visible,
    TOOL_OF_ANOTHER_TENANT: check_tool_tenant,
}


# --- reading the database in bounded pages ----------------------------------------------------

_INVOCATION_FIELDS = (
    "id", "state", "event_seq", "digest", "commit_status", "authorization", "created_at", "tool_spec_id",
    "subject_id", "model_call_id", "tool_name", "tool_version", "proposal__name", "tenant_id", "tool_spec__tenant_id",
)
_ADMISSION_FIELDS = (
    "tenant__slug", "normalization_context", "normalized_arguments", "proposal__arguments_bytes", "proposal__parser",
    "validation__strict_rendering__null_as_absent",
)


@contextlib.contextmanager
def _page_snapshot():
    """One consistent view for a page's three queries (the caller's transaction if it has one)."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _batches(ids: list, size: int = IN_BATCH) -> Iterator[list]:
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


def invocation_pages(
    *, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE, with_admission: bool = True,
    with_visibility: bool = True,
) -> Iterator[list[InvocationRecord]]:
    """Invocations created at/after ``since`` in ``(created_at, id)`` order, ``chunk_size`` at a time.

    ``with_admission`` loads what re-admission and grant coverage need; ``with_visibility``
    each invocation's model-call visible set (one more ``IN`` query per page).
    """
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    base = Invocation.objects.order_by("created_at", "id")
    if since is not None:
        base = base.filter(created_at__gte=since)
    fields = _INVOCATION_FIELDS + (_ADMISSION_FIELDS if with_admission else ())
    after: tuple | None = None
    while True:
        page = base
        if after is not None:
            # Keyset: the first conjunct alone bounds an index range scan on created_at.
            page = page.filter(Q(created_at__gte=after[0]) & (Q(created_at__gt=after[0]) | Q(id__gt=after[1])))
        with _page_snapshot():
            rows = list(page.values(*fields)[:chunk_size])
            if not rows:
                return
            ids = [row["id"] for row in rows]
            events: dict[Any, list[EventRow]] = defaultdict(list)
            confirmations: dict[Any, list[ConfirmationRow]] = defaultdict(list)
            for batch in _batches(ids):
                for inv_id, seq, src, dst, kind, at in Event.objects.filter(invocation_id__in=batch).order_by().annotate(
                    # Only the authorization check reads a time, that of entering EXECUTING; loading
                    # every event's timestamp would double the cost of the scan.
                    executing_at=Case(When(to_state=State.EXECUTING, then=F("at")), default=None, output_field=DateTimeField()),
                ).values_list("invocation_id", "seq", "from_state", "to_state", "kind", "executing_at"):
                    events[inv_id].append(EventRow(seq, src, dst, kind, at))
                for pk, inv_id, state, digest, decided_at in Confirmation.objects.filter(
                    invocation_id__in=batch
                ).order_by().values_list("id", "invocation_id", "state", "digest", "decided_at"):
                    confirmations[inv_id].append(ConfirmationRow(str(pk), state, digest, decided_at))
            visible: dict[Any, list[VisibleTool]] = defaultdict(list)
            if with_visibility:
                for batch in _batches(sorted({row["model_call_id"] for row in rows})):
                    for call_id, spec_id, mf_name, ref in ModelCallTool.objects.filter(
                        model_call_id__in=batch
                    ).order_by().values_list("model_call_id", "tool_spec_id", "model_facing_name", "tool_ref"):
                        visible[call_id].append(VisibleTool(spec_id, mf_name, ref))
        after = (rows[-1]["created_at"], rows[-1]["id"])
        records = []
        for row in rows:
            rec = InvocationRecord(
                id=str(row["id"]), state=row["state"], event_seq=row["event_seq"], digest=row["digest"],
                commit_status=row["commit_status"], authorization=row["authorization"], created_at=row["created_at"],
                tool_spec_id=row["tool_spec_id"], subject_id=str(row["subject_id"]),
                tenant_id=row["tenant_id"], tool_tenant_id=row["tool_spec__tenant_id"],
                tool_ref=f"{row['tool_name']}@{row['tool_version']}" if row["tool_name"] else "",
                proposal_name=row["proposal__name"],
                visible=visible.get(row["model_call_id"], []) if with_visibility else None,
                events=sorted(events.get(row["id"], ()), key=lambda e: e.seq),
                confirmations=confirmations.get(row["id"], []),
            )
            if with_admission:
                raw = row["proposal__arguments_bytes"]
                rec.tenant_slug = row["tenant__slug"]
                rec.normalization_context = row["normalization_context"]
                rec.normalized_arguments = row["normalized_arguments"]
                rec.arguments_bytes = bytes(raw) if raw is not None else None
                rec.parser = row["proposal__parser"]
                rec.null_as_absent = row["validation__strict_rendering__null_as_absent"]
            records.append(rec)
        yield records


# --- entry points -------------------------------------------------------------------------------

def audit(
    *,
    since: datetime | None = None,
    kinds: Iterable[str] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: Callable[[int], None] | None = None,
    stats: Counter | None = None,
) -> Iterator[Violation]:
    """Every violation of the selected ``kinds`` (default: all) among invocations since ``since``.

    ``progress(n)`` is called after each page with the number of invocations checked so far;
    ``stats`` (a Counter) receives ``invocations``, ``events``, ``digests_checked`` and
    ``digests_unverifiable``.
    """
    selected = tuple(KINDS if kinds is None else kinds)
    unknown = sorted(set(selected) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown violation kind(s): {', '.join(unknown)}")
    stats = stats if stats is not None else Counter()
    stateful = {DIGEST_NOT_REPRODUCIBLE: lambda: DigestReproducer(stats), EXECUTED_BEYOND_GRANTS: GrantCoverage}
    checks: list[Callable[[InvocationRecord], Iterable[Violation]]] = [
        stateful[kind]() if kind in stateful else _SIMPLE_CHECKS[kind] for kind in KINDS if kind in selected
    ]
    checked = 0
    pages = invocation_pages(
        since=since, chunk_size=chunk_size, with_admission=bool(set(stateful) & set(selected)),
        with_visibility=TOOL_NOT_VISIBLE in selected,
    )
    for page in pages:
        for rec in page:
            stats["events"] += len(rec.events)
            for check in checks:
                yield from check(rec)
        checked += len(page)
        stats["invocations"] = checked
        if progress is not None:
            progress(checked)


def edges_not_in_table(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[EDGE_NOT_IN_TABLE], chunk_size=chunk_size)


def executions_without_authorization(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[EXECUTED_WITHOUT_AUTHORIZATION], chunk_size=chunk_size)


def confirmation_digest_mismatches(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[CONFIRMATION_DIGEST_MISMATCH], chunk_size=chunk_size)


def commits_then_not_happened(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[COMMITTED_THEN_NOT_HAPPENED], chunk_size=chunk_size)


def digests_not_reproducible(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[DIGEST_NOT_REPRODUCIBLE], chunk_size=chunk_size)


def events_after_terminal(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[EVENTS_AFTER_TERMINAL], chunk_size=chunk_size)


def seq_gaps(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[SEQ_GAP], chunk_size=chunk_size)


def tools_not_visible(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[TOOL_NOT_VISIBLE], chunk_size=chunk_size)


def tools_of_another_tenant(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[TOOL_OF_ANOTHER_TENANT], chunk_size=chunk_size)


def executions_beyond_grants(*, since: datetime | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[Violation]:
    yield from audit(since=since, kinds=[EXECUTED_BEYOND_GRANTS], chunk_size=chunk_size)


# --- --since ------------------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(value: str, *, now: datetime | None = None) -> datetime:
    """``24h``, ``7d``, ``1d12h``, ``90m``, ``2w`` before ``now``; or an ISO date / datetime.

    A naive datetime (or a bare date, read as its midnight) is in the default time zone.
    """
    text = (value or "").strip()
    compact = text.lower().replace(" ", "")
    if compact and _DURATION_PART.sub("", compact) == "":
        delta = timedelta()
        for amount, unit in _DURATION_PART.findall(compact):
            delta += timedelta(**{_UNITS[unit]: float(amount)})
        return (now or timezone.now()) - delta
    try:
        moment = parse_datetime(text)
    except ValueError:
        moment = None
    if moment is None:
        try:
            day = parse_date(text)
        except ValueError:
            day = None
        if day is None:
            raise ValueError(f"--since wants an ISO date/datetime or a duration like 24h, 7d, 90m; not {value!r}")
        moment = datetime.combine(day, time.min)
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_default_timezone())
    return moment
