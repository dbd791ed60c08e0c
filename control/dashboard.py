"""The operations dashboard (console home, ``/console/``): small charts that link to the filtered lists.

What it shows, for a window of the last 24 h (hourly buckets) or 7 d (6-hour buckets):

* invocations created per bucket, by final-so-far state (stacked bars, plus one sparkline per state);
* what is in flight now: pending confirmations and OUTCOME_UNKNOWN calls with the age of the oldest,
  calls executing or prepared;
* attempts per tool with their failure classes (``Attempt.failure_class``);
* runs that ended with an exhausted budget, by reason.

Every query is bounded by the window or by a small state, never a COUNT over the whole table
(measured on 1,000,000 invocations / 1.7 M attempts, PostgreSQL 15, ``bench/console.py``):

==========================  ======================================================================
query                       plan
==========================  ======================================================================
states × hour (window)      ``invocations_inv_state_created`` (state, created_at): ``state IN (all
                            states) AND created_at >= since`` is an index-only range scan per
                            state — 17 ms for 24 h (36 k rows), 150 ms for 7 d (250 k rows)
in flight by state/tool     same index, non-terminal states only: ~10 ms, whatever the table size
pending confirmations       ``invocations_conf_tool`` / ``invocations_conf_queue`` (the pending rows'
                            expiry and escalation read from the heap), 1 ms
attempts × tool × class     the expensive one: Attempt has no tool column and no index on
                            ``started_at``, so PostgreSQL scans every attempt and joins the window's
                            ones to their invocations (~350 ms for 24 h, ~1 s for 7 d). An index on
                            ``started_at`` alone does not help (the join stays); a ``tool_spec``
                            column on Attempt with an index on (started_at) INCLUDE (tool_spec,
                            failure_class, ended_at) makes it an index-only scan (~85 ms / ~215 ms).
                            Until then its rows are cached longer (``ATTEMPTS_CACHE_SECONDS``).
exhausted runs              no index on Run.status/ended_at: a scan of the (small) run table, 2 ms
==========================  ======================================================================

The whole payload is cached for ``CACHE_SECONDS`` with Django's cache framework (the attempts
rows for ``ATTEMPTS_CACHE_SECONDS``, see there). With the default
``LocMemCache`` that cache is per process: each web worker computes the payload at most once per
15 s per window, and two workers may show numbers up to 15 s apart (the page says how old they
are). Configure a shared cache (Redis) in ``CACHES`` to compute it once per deployment instead.

Who may see it, and which numbers: active staff (``admin_view``) with
``invocations_app.view_invocation`` (superusers have it) see every tenant; staff holding
``view_calls``, ``approve_calls`` or ``resolve_calls`` on some tenants (guardian) see the numbers
of those tenants only (``console_tenant_scope``). The payload is cached per tenant set — everyone
with the same set shares it; the queues it links to apply their own (tenant, tool) scope.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.contrib import admin
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, Min, Q
from django.db.models.functions import TruncHour
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from specs_app.upstream_reads import upstream_alerts
from toolops.sql import has_field
from toolops.runtime.states import TERMINAL, State

from invocations_app.models import Attempt, Confirmation, Invocation, Run
from control.formatting import age
from control.selectors import console_tenant_scope

CACHE_SECONDS = 15
CACHE_KEY = "toolops:dashboard:v2:{window}:{scope}"
# Attempts per tool is the one query that cannot stay small today: Attempt has no tool column, so
# every attempt of the window is joined to its invocation (see the module docstring). Its rows are
# kept longer than the rest of the payload, so the 15 s refresh does not pay for it each time.
ATTEMPTS_CACHE_SECONDS = {"24h": 60, "7d": 300}
ATTEMPTS_CACHE_KEY = "toolops:dashboard:v2:attempts:{window}:{scope}"
VIEW_PERMISSION = "invocations_app.view_invocation"

# window key -> (label, length, bucket)
WINDOWS: dict[str, tuple[str, timedelta, timedelta]] = {
    "24h": ("last 24 hours", timedelta(hours=24), timedelta(hours=1)),
    "7d": ("last 7 days", timedelta(days=7), timedelta(hours=6)),
}
DEFAULT_WINDOW = "24h"

ALL_STATES = [s.value for s in State]
IN_FLIGHT = [s.value for s in State if s not in TERMINAL]  # includes OUTCOME_UNKNOWN and COMMITTED

# Order of the stacked bars (bottom first) and the house colours (cf. the confirmation queue).
STATE_STYLE: dict[str, tuple[str, str]] = {
    State.OBSERVED: ("#2e7d32", "done"),
    State.COMMITTED: ("#66a86a", "done"),
    State.PARSE_REJECTED: ("#9e9e9e", "rejected"),
    State.VALIDATION_REJECTED: ("#7d7d7d", "rejected"),
    State.AUTHORIZATION_REJECTED: ("#5f5f5f", "rejected"),
    State.CANCELLED_BEFORE_COMMIT: ("#b7a57a", "cancelled"),
    State.FAILED_BEFORE_COMMIT: ("#ba2121", "failed"),
    State.FAILED_AFTER_COMMIT: ("#7a1010", "failed"),
    State.OUTCOME_UNKNOWN: ("#6a4c93", "unknown"),
    State.EXECUTING: ("#417690", "in flight"),
    State.PREPARED: ("#79aec8", "in flight"),
    State.AUTHORIZED: ("#c97b00", "in flight"),
    State.VALIDATED: ("#a8c6d6", "in flight"),
    State.PARSED: ("#c4d8e2", "in flight"),
    State.PROPOSED: ("#dbe7ee", "in flight"),
}
STATE_ORDER = list(STATE_STYLE)

# Attempt outcome classes (toolops.decisions.execution) and their colours; "ok" = ended with no failure.
FAILURE_STYLE: dict[str, str] = {
    "ok": "#2e7d32",
    "running": "#79aec8",
    "rate_limited": "#e0a100",
    "transient": "#c97b00",
    "not_reached": "#9e9e9e",
    "business_rejected": "#8d6e63",
    "permanent": "#ba2121",
    "timeout_unknown": "#6a4c93",
}
AGE_BUCKETS = [  # pending confirmations by time waiting: (label, upper bound)
    ("< 5 min", timedelta(minutes=5)),
    ("5–15 min", timedelta(minutes=15)),
    ("15–60 min", timedelta(hours=1)),
    ("1–4 h", timedelta(hours=4)),
    ("> 4 h", None),
]

SPARK_W, SPARK_H = 150, 30
STACK_W, STACK_H = 720, 150


# --- payload --------------------------------------------------------------------------------------

@dataclass
class Spark:
    """A sparkline's geometry: polyline points and the filled area under it (SVG user units)."""

    points: str
    area: str
    peak: int
    last: int


@dataclass
class StateRow:
    state: str
    color: str
    group: str
    total: int
    series: list[int]
    spark: Spark
    url: str
    share: float = 0.0


@dataclass
class Segment:
    x: float
    y: float
    w: float
    h: float
    color: str
    title: str
    url: str


@dataclass
class ToolRow:
    tool: str
    attempts: int
    failed: int
    failure_rate: float
    series: list[int]
    failures_series: list[int]
    spark: Spark
    fail_spark: Spark
    classes: list[tuple[str, int, str, float]]  # (class, count, colour, percent)
    url: str
    failed_url: str


@dataclass
class Waiting:
    count: int = 0
    oldest: datetime | None = None
    oldest_age: str = ""
    url: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class Dashboard:
    window: str
    window_label: str
    bucket_label: str
    since: datetime
    generated_at: datetime
    bucket_starts: list[datetime]
    axis: list[tuple[float, str]]
    states: list[StateRow]
    stack: list[Segment]
    stack_max: int
    total: int
    in_flight: dict[str, Waiting]
    pending: Waiting
    pending_ages: list[tuple[str, int, float]]
    pending_by_tool: list[dict]
    unknown: Waiting
    unknown_by_tool: list[tuple[str, int, str]]
    tools: list[ToolRow]
    exhausted_total: int
    exhausted_series: list[int]
    exhausted_spark: Spark
    exhausted_by_reason: list[tuple[str, int, float]]
    exhausted_url: str
    attempts_generated_at: datetime | None = None
    quarantined: list[dict] = field(default_factory=list)  # imported MCP tools refused until re-versioned
    unreachable: list[dict] = field(default_factory=list)  # imported MCP tools whose server the last refresh could not list


# --- helpers ----------------------------------------------------------------------------------

def _window_bounds(window: str, now: datetime) -> tuple[datetime, timedelta, int]:
    """Buckets aligned to the bucket size (UTC), the newest one containing ``now``."""
    _, length, step = WINDOWS[window]
    epoch = datetime(2000, 1, 1, tzinfo=now.tzinfo)
    current = epoch + ((now - epoch) // step) * step
    n = int(length / step)
    return current - (n - 1) * step, step, n


def _index(moment: datetime, since: datetime, step: timedelta, n: int) -> int | None:
    if moment is None:
        return None
    i = int((moment - since) // step)
    return i if 0 <= i < n else None


def spark(values: list[int], *, width: int = SPARK_W, height: int = SPARK_H, peak: int | None = None) -> Spark:
    """Sparkline geometry for ``values`` (0 at the bottom; ``peak`` fixes the scale)."""
    top = max(peak if peak is not None else max(values, default=0), 1)
    n = max(len(values) - 1, 1)
    pts = [(round(i * width / n, 1), round(height - 1 - v * (height - 2) / top, 1)) for i, v in enumerate(values)]
    points = " ".join(f"{x},{y}" for x, y in pts)
    area = f"0,{height} " + points + f" {width},{height}" if pts else ""
    return Spark(points=points, area=area, peak=max(values, default=0), last=values[-1] if values else 0)


def _changelist(**params) -> str:
    url = reverse("admin:invocations_app_invocation_changelist")
    return f"{url}?{urlencode(params)}" if params else url


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


# --- selectors --------------------------------------------------------------------------------

def _scoped(qs, tenants: frozenset[int] | None, field: str = "tenant_id"):
    """``qs`` limited to the tenant ids ``tenants`` (``None``: every tenant)."""
    return qs if tenants is None else qs.filter(**{f"{field}__in": sorted(tenants)})


def states_by_bucket(*, since: datetime, step: timedelta, n: int, tenants: frozenset[int] | None = None) -> dict[str, list[int]]:
    """Invocations created since ``since``, counted by state and bucket (one grouped query).

    ``state IN (every state)`` lets PostgreSQL use (state, created_at) as an index-only range scan
    per state instead of reading heap rows found through (created_at).
    """
    out = {s: [0] * n for s in ALL_STATES}
    rows = (
        _scoped(Invocation.objects.filter(state__in=ALL_STATES, created_at__gte=since), tenants)
        .annotate(hour=TruncHour("created_at")).values("state", "hour").annotate(n=Count("*")).order_by()
    )
    for row in rows:
        i = _index(row["hour"], since, step, n)
        if i is not None and row["state"] in out:
            out[row["state"]][i] += row["n"]
    return out


def in_flight_by_state(*, tenants: frozenset[int] | None = None) -> dict[str, dict]:
    """Non-terminal invocations now, by state and tool, with the oldest per state (all time, small)."""
    out: dict[str, dict] = {}
    rows = (
        _scoped(Invocation.objects.filter(state__in=IN_FLIGHT), tenants).values("state", "tool_name")
        .annotate(n=Count("*"), oldest=Min("created_at")).order_by()
    )
    for row in rows:
        entry = out.setdefault(row["state"], {"count": 0, "oldest": None, "by_tool": {}})
        entry["count"] += row["n"]
        if entry["oldest"] is None or row["oldest"] < entry["oldest"]:
            entry["oldest"] = row["oldest"]
        entry["by_tool"][row["tool_name"]] = entry["by_tool"].get(row["tool_name"], 0) + row["n"]
    return out


def pending_confirmations(*, now: datetime, tenants: frozenset[int] | None = None) -> list[dict]:
    """Pending confirmations per tool version: count, oldest, overdue, escalated, and counts per waiting-time bucket."""
    ages = {}
    lower = None
    for k, (label, upper) in enumerate(AGE_BUCKETS):
        cond = Q()
        if upper is not None:
            cond &= Q(created_at__gt=now - upper)
        if lower is not None:
            cond &= Q(created_at__lte=now - lower)
        ages[f"age{k}"] = Count("pk", filter=cond) if cond else Count("*")
        lower = upper
    return list(
        _scoped(Confirmation.objects.filter(state=Confirmation.Status.PENDING), tenants)
        .values("tool_spec_id", "tool_spec__name", "tool_spec__version")
        .annotate(n=Count("*"), oldest=Min("created_at"), overdue=Count("pk", filter=Q(expires_at__lte=now)),
                  escalated=Count("pk", filter=Q(escalated_at__isnull=False)), **ages)
        .order_by("tool_spec__name", "tool_spec__version")
    )


# Attempt has no tool column today, so the tool comes from the invocation (a join per attempt). Once
# ``Attempt.tool_spec`` exists (see the module docstring) the tiny ToolSpec table is joined instead.
_ATTEMPT_TOOL = "tool_spec__name" if has_field(Attempt, "tool_spec") else "invocation__tool_name"


def attempts_by_tool(*, since: datetime, step: timedelta, n: int, tenants: frozenset[int] | None = None) -> list[dict]:
    """Attempts started since ``since`` by tool, outcome class and bucket (one grouped query)."""
    return list(
        _scoped(Attempt.objects.filter(started_at__gte=since), tenants, "invocation__tenant_id")
        .annotate(hour=TruncHour("started_at"))
        .values("failure_class", "hour", tool=F(_ATTEMPT_TOOL))
        .annotate(n=Count("*"), running=Count("pk", filter=Q(ended_at__isnull=True)))
        .order_by()
    )


def exhausted_runs(*, since: datetime, tenants: frozenset[int] | None = None) -> list[dict]:
    """Runs that ended ``exhausted`` since ``since``, by reason and hour."""
    return list(
        _scoped(Run.objects.filter(status=Run.Status.EXHAUSTED, ended_at__gte=since), tenants)
        .annotate(hour=TruncHour("ended_at")).values("end_reason", "hour").annotate(n=Count("*")).order_by()
    )


# --- assembling the payload -----------------------------------------------------------------------

def build_dashboard(*, window: str = DEFAULT_WINDOW, now: datetime | None = None,
                    attempts: tuple[datetime, list[dict]] | None = None, tenants: frozenset[int] | None = None) -> Dashboard:
    """Compute the dashboard (five grouped queries; four when ``attempts`` — ``(computed_at, rows of
    attempts_by_tool)`` — is given) over the tenant ids ``tenants`` (``None``: every tenant);
    ``dashboard_get`` caches it."""
    now = now or timezone.now()
    label, _, step = WINDOWS[window]
    since, step, n = _window_bounds(window, now)
    since_param = since.isoformat()
    starts = [since + k * step for k in range(n)]

    # 1. states over time
    by_state = states_by_bucket(since=since, step=step, n=n, tenants=tenants)
    total = sum(sum(v) for v in by_state.values())
    states = []
    for state in STATE_ORDER:
        series = by_state[state]
        color, group = STATE_STYLE[state]
        states.append(StateRow(
            state=state, color=color, group=group, total=sum(series), series=series, spark=spark(series),
            url=_changelist(state__exact=state, created_at__gte=since_param), share=_pct(sum(series), total),
        ))
    column_totals = [sum(by_state[s][k] for s in ALL_STATES) for k in range(n)]
    stack_max = max(column_totals, default=0)
    stack, bar_w = [], STACK_W / n
    for k in range(n):
        y = float(STACK_H)
        for row in states:
            v = row.series[k]
            if not v:
                continue
            h = v * STACK_H / max(stack_max, 1)
            y -= h
            stack.append(Segment(
                x=round(k * bar_w + 1, 2), y=round(y, 2), w=round(bar_w - 2, 2), h=round(h, 2), color=row.color,
                title=f"{starts[k]:%d %b %H:%M} UTC · {row.state}: {v}",
                url=_changelist(state__exact=row.state, created_at__gte=starts[k].isoformat(),
                                created_at__lt=(starts[k] + step).isoformat()),
            ))
    tick_every = 6 if window == "24h" else 4
    axis = [(round(k * bar_w + 1, 1), f"{starts[k]:%H:%M}" if window == "24h" else f"{starts[k]:%a %d}")
            for k in range(0, n, tick_every)]

    # 2. in flight now (all time, non-terminal states only)
    flight = in_flight_by_state(tenants=tenants)
    in_flight = {}
    for state in IN_FLIGHT:
        entry = flight.get(state, {"count": 0, "oldest": None, "by_tool": {}})
        in_flight[state] = Waiting(count=entry["count"], oldest=entry["oldest"], oldest_age=age(entry["oldest"], now),
                                   url=_changelist(state__exact=state), extra={"by_tool": entry["by_tool"]})
    unknown = in_flight[State.OUTCOME_UNKNOWN]
    unknown.url = reverse("support:unknown_queue")
    unknown_by_tool = sorted(
        ((name or "(unresolved)", count, _changelist(state__exact=State.OUTCOME_UNKNOWN, tool_name=name))
         for name, count in unknown.extra["by_tool"].items()), key=lambda t: -t[1])

    # 3. pending confirmations
    per_tool = pending_confirmations(now=now, tenants=tenants)
    pending = Waiting(url=reverse("confirmations:queue"))
    age_counts = [0] * len(AGE_BUCKETS)
    pending_by_tool = []
    for row in per_tool:
        pending.count += row["n"]
        if row["oldest"] and (pending.oldest is None or row["oldest"] < pending.oldest):
            pending.oldest = row["oldest"]
        for k in range(len(AGE_BUCKETS)):
            age_counts[k] += row[f"age{k}"]
        pending_by_tool.append({
            "tool": f"{row['tool_spec__name']}@{row['tool_spec__version']}", "count": row["n"], "overdue": row["overdue"],
            "oldest_age": age(row["oldest"], now), "url": f"{reverse('confirmations:queue')}?tool={row['tool_spec_id']}",
        })
    pending.oldest_age = age(pending.oldest, now)
    pending.extra = {"overdue": sum(r["overdue"] for r in per_tool), "escalated": sum(r["escalated"] for r in per_tool)}
    top = max(age_counts, default=0)
    pending_ages = [(AGE_BUCKETS[k][0], age_counts[k], _pct(age_counts[k], max(top, 1))) for k in range(len(AGE_BUCKETS))]
    for row in pending_by_tool:
        row["percent"] = _pct(row["count"], max((r["count"] for r in pending_by_tool), default=1))

    # 4. attempts and failure classes per tool
    tools: dict[str, dict] = {}
    attempts_at, attempt_rows = attempts if attempts is not None else (now, attempts_by_tool(since=since, step=step, n=n, tenants=tenants))
    for row in attempt_rows:
        i = _index(row["hour"], since, step, n)
        if i is None:
            continue  # computed for an earlier window (cached rows)
        name = row["tool"] or "(unresolved)"
        entry = tools.setdefault(name, {"series": [0] * n, "failures": [0] * n, "classes": {}})
        cls = row["failure_class"] or "ok"
        running = row["running"] if cls == "ok" else 0
        counts = {"running": running, cls: row["n"] - running} if running else {cls: row["n"]}
        for c, v in counts.items():
            entry["classes"][c] = entry["classes"].get(c, 0) + v
        entry["series"][i] += row["n"]
        if cls != "ok":
            entry["failures"][i] += row["n"]
    tool_rows = []
    for name in sorted(tools):
        entry = tools[name]
        attempts = sum(entry["series"])
        failed = sum(v for c, v in entry["classes"].items() if c not in ("ok", "running"))
        classes = [(c, entry["classes"][c], FAILURE_STYLE.get(c, "#999"), _pct(entry["classes"][c], attempts))
                   for c in FAILURE_STYLE if entry["classes"].get(c)]
        classes += [(c, v, "#999", _pct(v, attempts)) for c, v in entry["classes"].items() if c not in FAILURE_STYLE and v]
        tool_rows.append(ToolRow(
            tool=name, attempts=attempts, failed=failed, failure_rate=_pct(failed, attempts), series=entry["series"],
            failures_series=entry["failures"], spark=spark(entry["series"]),
            fail_spark=spark(entry["failures"], peak=max(max(entry["failures"], default=0), 1)), classes=classes,
            url=_changelist(tool_name=name, created_at__gte=since_param),
            failed_url=_changelist(tool_name=name, state__exact=State.FAILED_BEFORE_COMMIT, created_at__gte=since_param),
        ))

    # 5. budget exhaustions
    ex_series, reasons = [0] * n, {}
    for row in exhausted_runs(since=since, tenants=tenants):
        i = _index(row["hour"], since, step, n)
        if i is not None:
            ex_series[i] += row["n"]
        reasons[row["end_reason"] or "(no reason)"] = reasons.get(row["end_reason"] or "(no reason)", 0) + row["n"]
    ex_top = max(reasons.values(), default=1)
    by_reason = sorted(((r, v, _pct(v, ex_top)) for r, v in reasons.items()), key=lambda t: -t[1])

    return Dashboard(
        window=window, window_label=label, bucket_label="hour" if step == timedelta(hours=1) else f"{int(step.total_seconds() // 3600)} h",
        since=since, generated_at=now, bucket_starts=starts, axis=axis, states=states, stack=stack, stack_max=stack_max,
        total=total, in_flight=in_flight, pending=pending, pending_ages=pending_ages, pending_by_tool=pending_by_tool,
        unknown=unknown, unknown_by_tool=unknown_by_tool, tools=tool_rows, exhausted_total=sum(ex_series),
        exhausted_series=ex_series, exhausted_spark=spark(ex_series), exhausted_by_reason=by_reason,
        exhausted_url=reverse("admin:invocations_app_run_changelist") + "?" + urlencode({"status__exact": Run.Status.EXHAUSTED}),
        attempts_generated_at=attempts_at, **_upstream_cards(tenants),
    )


def _upstream_cards(tenants: frozenset[int] | None) -> dict[str, list[dict]]:
    """6. imported MCP tools whose upstream definition changed or vanished (``quarantined``), and
    those whose server the last refresh could not list — down, or refused by the egress policy —
    so their pins are unverified (``unreachable``); one query for both. A tenant-scoped view lists
    only tools owned by those tenants (global tools are the platform's)."""
    quarantined, unreachable = upstream_alerts(tenants=tenants)
    return {
        "quarantined": [{"ref": w.tool_spec.ref, "spec_pk": w.tool_spec_id, "pk": w.pk, "upstream_name": w.upstream_name,
                         "server_url": w.server_url, "state": w.state, "changed": ", ".join(w.changed_fields),
                         "detected_at": w.detected_at} for w in quarantined],
        "unreachable": [{"ref": w.tool_spec.ref, "spec_pk": w.tool_spec_id, "pk": w.pk, "upstream_name": w.upstream_name,
                         "server_url": w.server_url, "error": w.check_error, "checked_at": w.checked_at}
                        for w in unreachable],
    }


def _scope_key(tenants: frozenset[int] | None) -> str:
    if tenants is None:
        return "all"
    ids = ",".join(str(t) for t in sorted(tenants))
    return hashlib.sha256(ids.encode()).hexdigest()[:24]  # cache keys stay short for any number of tenants


def dashboard_get(*, window: str = DEFAULT_WINDOW, tenants: frozenset[int] | None = None) -> tuple[Dashboard, bool]:
    """The dashboard for ``window`` over ``tenants`` (``None``: all) from the cache, computed at most once
    per ``CACHE_SECONDS`` per tenant set (per process with the default LocMemCache). Returns
    ``(dashboard, from_cache)``."""
    scope = _scope_key(tenants)
    key = CACHE_KEY.format(window=window, scope=scope)
    data = cache.get(key)
    if data is not None:
        return data, True
    now = timezone.now()
    attempts_key = ATTEMPTS_CACHE_KEY.format(window=window, scope=scope)
    attempts = cache.get(attempts_key)
    if attempts is None:
        since, step, n = _window_bounds(window, now)
        attempts = (now, attempts_by_tool(since=since, step=step, n=n, tenants=tenants))
        cache.set(attempts_key, attempts, ATTEMPTS_CACHE_SECONDS[window])
    data = build_dashboard(window=window, now=now, attempts=attempts, tenants=tenants)
    cache.set(key, data, CACHE_SECONDS)
    return data, False


# --- view -----------------------------------------------------------------------------------------

@require_GET
def dashboard_view(request: HttpRequest) -> HttpResponse:
    user = request.user
    tenants = console_tenant_scope(user=user)
    if tenants is not None and not tenants:
        raise PermissionDenied("the operations dashboard needs permission to view invocations of some tenant")
    window = request.GET.get("window") or DEFAULT_WINDOW
    if window not in WINDOWS:
        window = DEFAULT_WINDOW
    data, cached = dashboard_get(window=window, tenants=tenants)
    now = timezone.now()
    context = {
        **admin.site.each_context(request),
        "title": "Operations",
        "d": data,
        "from_cache": cached,
        "data_age": max(0, int((now - data.generated_at).total_seconds())),
        "cache_seconds": CACHE_SECONDS,
        "attempts_age": max(0, int((now - (data.attempts_generated_at or data.generated_at)).total_seconds())),
        "attempts_cache_seconds": ATTEMPTS_CACHE_SECONDS[data.window],
        "windows": [(key, WINDOWS[key][0]) for key in WINDOWS],
        "failure_legend": list(FAILURE_STYLE.items()),
        "spark_w": SPARK_W, "spark_h": SPARK_H, "stack_w": STACK_W, "stack_h": STACK_H,
        "executing": data.in_flight[State.EXECUTING],
        "prepared": data.in_flight[State.PREPARED],
        "committed": data.in_flight[State.COMMITTED],
        "failed_total": sum(r.total for r in data.states if r.group == "failed"),
        "failed_url": _changelist(state__in=f"{State.FAILED_BEFORE_COMMIT},{State.FAILED_AFTER_COMMIT}",
                                  created_at__gte=data.since.isoformat()),
    }
    return TemplateResponse(request, "admin/dashboard.html", context)


urlpatterns = [
    path("", admin.site.admin_view(dashboard_view), name="home"),
]
