"""Bulk-load a large, consistent history of invocations for the console benchmarks (PostgreSQL COPY).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/toolops_bench_console \\
        .venv/bin/python manage.py load_bulk --invocations 1000000 --events-per-invocation 10 [--batch 20000]

What it writes, per batch and in one transaction: runs and their model calls (with the visible
tool set copied from one model call made through the services), one proposal per invocation
(the Proposal↔Invocation one-to-one), the invocations, their events, their attempts and the
confirmations of the tools that need one. Rows go in with psycopg 3 ``COPY … FROM STDIN``; the
database keeps every constraint, index and trigger in place (foreign keys are checked at each
batch's commit; the state-edge and append-only triggers guard UPDATE/DELETE only, so they do not
fire here — instead every event chain is checked against ``toolops.runtime.states`` before it is
written, so no invalid edge can be loaded).

The data: one tenant, one subject, the four demo ToolSpecs (plus ~1 % of proposals naming a tool
that is not visible), ``--invocations-per-run`` invocations per Run (one ModelCall each, ~5 % of
Runs end ``exhausted``), ``created_at`` spread over ``--days`` with a daily rhythm and slight growth,
each invocation ending in a state reached by a valid path (rejections at each layer, confirmations
approved/denied/expired, retries, failures before and after the commit, OUTCOME_UNKNOWN), and
``--pending-confirmations`` pending confirmations and a few in-flight calls at the recent end.
Retried attempts (each adds ``attempt_ended``, ``retry_scheduled``, ``attempt_started``) bring the
mean number of events per invocation to ``--events-per-invocation``; at 10 that means about one
retry per executed call (≈ 55 % of attempts fail as rate_limited/transient) — far more than a
healthy production, which is fine for a load test but shows on the dashboard's failure rates.
Not written: tool messages, idempotency records, grant usages (no console page needs them);
digests are random hex, so ``audit_invariants`` reports them as "not re-run" (it finds no violation).

Pending confirmations expire ``--pending-ttl-hours`` after the load (default 72 h), so the
confirmation queue (which offers only unexpired ones) keeps the same data set
while a benchmark runs. Refuses to run unless the database name contains "bench" (or --force).
"""
from __future__ import annotations

import bisect
import json
import math
import random
import time
import uuid
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone

from invocations_app.models import (
    Attempt, Confirmation, Event, Invocation, ModelCall, ModelCallTool, Proposal, Run,
)
from invocations_app.runs import model_call_create, run_create
from devtools.demo import DEMO_GRANTS, DEMO_TOOLSPECS
from specs_app.models import Capability, Grant, Subject, Tenant, ToolSpec
from specs_app.services import toolspec_publish
from toolops.db_guards import birth_guard_suspended
from toolops.sql import column_names, quoted, table_name
from toolops.runtime.states import TERMINAL, State, is_allowed

S = State
TENANT_SLUG = "bench-console"
OPS_USER = "bench-ops"
EXHAUST_REASONS = [
    "tool_calls budget exhausted", "tool_calls budget exhausted", "wall_seconds budget exhausted",
    "result_bytes budget exhausted", "cost budget exhausted", "model_calls budget exhausted",
]
# (tool name, share of proposals). None: a name that is not in the model call's visible set.
TOOL_MIX = [("weather.get_forecast", 0.41), ("web.fetch", 0.25), ("calendar.create_event", 0.22),
            ("payments.transfer", 0.11), (None, 0.01)]
CITIES = ["Paris", "Berlin", "Lisbon", "Osaka", "Shanghai", "Nairobi", "Lima", "Oslo", "Austin", "Perth"]
DOMAINS = ["docs.example.com", "status.example.org", "news.example.net", "wiki.example.com"]


# --- the outcome of one invocation, as a list of (from, to, kind, data, offset_ms, actor, span) --------

class Plan:
    __slots__ = ("tool", "state", "events", "attempts", "confirmation", "error", "validated", "commit", "result_status",
                 "external_id", "ends_open")

    def __init__(self, tool):
        self.tool = tool
        self.state = ""
        self.events: list[tuple] = []
        self.attempts: list[tuple] = []  # (number, span, start_ms, sent_ms, end_ms|None, commit, failure_class, outcome, decision)
        self.confirmation = None  # (state, requested_ms, decided_ms|None, reason)
        self.error = ("", "", {})
        self.validated = False
        self.commit = ""
        self.result_status = ""
        self.external_id = ""
        self.ends_open = False

    def step(self, to_state: str, kind: str, data: dict, at_ms: float, actor: str = "system", span: str | None = None):
        src = self.state
        if src and src != to_state and not is_allowed(src, to_state):  # never load an edge the state table forbids
            raise CommandError(f"bulk loader planned an invalid edge {src} -> {to_state}")
        if src in TERMINAL:
            raise CommandError(f"bulk loader planned an event after the terminal state {src}")
        self.events.append((src, to_state, kind, data, at_ms, actor, span))
        self.state = to_state


class Generator:
    """Deterministic (seeded) rows for invocation ``i`` of ``n``."""

    def __init__(self, *, n, days, now, seed, per_run, events_target, pending_target, specs, grants, ops_user_id,
                 tenant, subject, pending_ttl):
        self.rng = random.Random(seed)
        self.n, self.now, self.per_run = n, now, per_run
        self.start = now - timedelta(days=days)
        self.span_seconds = days * 86400 - 30
        self.specs, self.grants, self.ops_user_id = specs, grants, ops_user_id
        self.tenant, self.subject = tenant, subject
        self.pending_until = now + pending_ttl
        self._minute_cdf = self._build_cdf(days)
        confirm_share = sum(share for name, share in TOOL_MIX if name and specs[name].confirmation_policy.get("required"))
        # The last `pending_tail` invocations leave their confirmations pending (≈ pending_target of them).
        self.pending_tail = min(int(pending_target / max(confirm_share * 0.92, 1e-9)), n // 10) if pending_target else 0
        self.inflight_tail = min(150, n // 100)  # the newest calls are still executing / prepared
        self.events_target = events_target
        self.mean_retries = 0.0  # calibrated per batch (see ``pad_retries``)

    # -- time ----------------------------------------------------------------------------------
    def _build_cdf(self, days):
        """Minute-resolution CDF: a daily rhythm (quiet at night UTC), +20 % growth over the period."""
        weights, total = [], 0.0
        for m in range(days * 1440):
            hour = (m % 1440) / 60
            w = (1.0 + 0.65 * math.sin((hour - 8) / 24 * 2 * math.pi)) * (0.9 + 0.2 * m / (days * 1440))
            total += w
            weights.append(total)
        return [w / total for w in weights]

    def created_at(self, i: int) -> datetime:
        u = (i + 0.5) / self.n
        minute = bisect.bisect_left(self._minute_cdf, u)
        lo = self._minute_cdf[minute - 1] if minute else 0.0
        hi = self._minute_cdf[minute]
        frac = (u - lo) / (hi - lo) if hi > lo else 0.5
        return self.start + timedelta(seconds=min(minute * 60 + frac * 60, self.span_seconds))

    # -- one invocation ------------------------------------------------------------------------
    def pick_tool(self):
        r, acc = self.rng.random(), 0.0
        for name, share in TOOL_MIX:
            acc += share
            if r < acc:
                return name
        return TOOL_MIX[0][0]

    def plan(self, i: int, created: datetime) -> Plan:
        rng = self.rng
        name = self.pick_tool()
        spec = self.specs.get(name) if name else None
        p = Plan(spec)
        ref = spec.ref if spec else "weather.get_forcast@1"
        pspan = "%016x" % rng.getrandbits(64)
        p.step(S.PROPOSED, "proposed", {"name": ref, "bytes": 40 + rng.randrange(80), "proposal_span_id": pspan}, 0, span=pspan)
        r = rng.random()
        if r < 0.012:
            err = {"code": "parse_rejected", "message": "duplicate object key 'city'", "detail": {"reason": "duplicate_key", "offset": 27}}
            p.error = (err["code"], err["message"], err["detail"])
            p.step(S.PARSE_REJECTED, "parse_rejected", {"error": err}, 1.2)
            return p
        p.step(S.PARSED, "parsed", {"type": "dict"}, 1.0)
        if spec is None:
            err = {"code": "unknown_tool", "message": "the proposed tool is not in this model call's visible set",
                   "detail": {"visible": sorted(s.ref for s in self.specs.values())}}
            p.error = (err["code"], err["message"], err["detail"])
            p.step(S.VALIDATION_REJECTED, "unknown_tool", {"error": err}, 1.5)
            return p
        r = rng.random()
        if r < 0.045:
            if r < 0.03:
                err = {"code": "validation_rejected", "message": "1 schema error(s); first: /: Additional properties are not allowed ('units' was unexpected)",
                       "detail": {"layer": "schema", "issues": [{"pointer": "", "keyword": "additionalProperties"}]}}
                kind = "validation_rejected"
            else:
                err = {"code": "normalization_rejected", "message": "not a date: 'someday'", "detail": {"layer": "semantic", "pointer": "/date"}}
                kind = "normalization_rejected"
            p.error = (err["code"], err["message"], err["detail"])
            p.step(S.VALIDATION_REJECTED, kind, {"error": err}, 2.0)
            return p
        p.validated = True
        p.step(S.VALIDATED, "validated", {"digest": None}, 2.5)  # digest filled in by the caller
        if rng.random() < 0.02:
            reasons = [{"capability": spec.required_capabilities[0]["capability"], "reason": "scope: resource outside the granted scope"}]
            p.error = ("authorization_denied", "no grant covers this resource", {"reasons": reasons})
            p.step(S.AUTHORIZATION_REJECTED, "authorization_denied", {"reasons": reasons}, 3.5)
            return p
        confirm = bool(spec.confirmation_policy.get("required"))
        p.step(S.AUTHORIZED, "authorized", {"decision": "confirm" if confirm else "allow", "grant_ids": [self.grants[spec.name]]}, 3.5)
        t = 4.0
        recent = i >= self.n - self.inflight_tail
        if confirm:
            p.step(S.AUTHORIZED, "confirmation_requested", {"confirmation_id": None, "digest": None, "expires_at": None}, t)
            requested = t
            if i >= self.n - self.pending_tail:
                p.confirmation = ("pending", requested, None, "")
                return p
            r = rng.random()
            if r < 0.045:
                decided = t + rng.uniform(20_000, 600_000)
                reason = rng.choice(["duplicate of an existing event", "wrong account", "amount looks wrong", "not requested by the user"])
                p.confirmation = ("denied", requested, decided, reason)
                p.error = ("confirmation_denied", f"a human denied this call: {reason}", {})
                p.step(S.AUTHORIZATION_REJECTED, "confirmation_denied", {"confirmation_id": None, "reason": reason}, decided, actor=f"user:{OPS_USER}")
                return p
            if r < 0.095:
                decided = t + 900_000
                p.confirmation = ("expired", requested, decided, "")
                p.error = ("confirmation_expired", "nobody confirmed the call in time", {})
                p.step(S.CANCELLED_BEFORE_COMMIT, "confirmation_expired", {"confirmation_id": None}, decided)
                return p
            t = t + rng.uniform(5_000, 480_000)
            p.confirmation = ("approved", requested, t, "")
            p.step(S.PREPARED, "confirmation_approved", {"confirmation_id": None, "digest": None, "reason": ""}, t, actor=f"user:{OPS_USER}")
            if rng.random() < 0.005:
                t += rng.uniform(10, 500)
                p.step(S.PREPARED, "cancel_requested", {"reason": "user cancelled"}, t, actor="subject")
                p.error = ("cancelled", "cancelled before the commit boundary", {})
                p.step(S.CANCELLED_BEFORE_COMMIT, "cancelled", {"reason": "user cancelled"}, t + 2)
                return p
            if recent and rng.random() < 0.3:
                return p  # PREPARED: queued for a worker
        elif spec.side_effect_class != "read_only":
            p.step(S.PREPARED, "prepared", {}, t)
        # -- execution -----------------------------------------------------------------------
        write = spec.side_effect_class != "read_only"
        t += rng.uniform(5, 120)
        r = rng.random()
        if recent and r < 0.5:
            outcome = "open"
        elif write:
            outcome = ("unknown" if r < 0.004 else "failed" if r < 0.034 else "after" if r < 0.037 else "ok")
        else:
            outcome = "failed" if r < 0.03 else "ok"
        retries = self._retries()
        if outcome in ("unknown", "failed") and spec.side_effect_class == "write_unsafe":
            retries = 0  # write_unsafe: decide whether it may have committed before retrying
        p.step(S.EXECUTING, "execution_started", {"attempt": 1, "resend_same_key": False}, t)
        for number in range(1, retries + 2):
            span = "%016x" % rng.getrandbits(64)
            p.step(S.EXECUTING, "attempt_started", {"attempt": number, "attempt_id": span}, t, span=span)
            start = t
            sent = start + rng.uniform(0.5, 3)
            last = number == retries + 1
            if not last:
                failure = "rate_limited" if rng.random() < 0.55 else "transient"
                end = sent + rng.uniform(30, 900)
                delay = min(2 ** (number - 1), 30) + rng.uniform(0, 0.5)
                decision = {"action": "retry_after", "reason": failure, "delay_seconds": round(delay, 3), "attempt": number}
                out = {"commit": "not_committed", "failure_class": failure, "http_status": 429 if failure == "rate_limited" else 503}
                p.attempts.append((number, span, start, sent, end, "not_committed", failure, out, decision))
                p.step(S.EXECUTING, "attempt_ended", {"attempt": number, "outcome": out, "decision": decision}, end, span=span)
                t = end + delay * 1000
                p.step(S.EXECUTING, "retry_scheduled", {**decision, "due_at": None}, end + 1)
                continue
            if outcome == "open":
                p.attempts.append((number, span, start, sent, None, "", "", {}, {}))
                p.ends_open = True
                return p
            end = sent + rng.uniform(40, 1800)
            if outcome == "ok" or outcome == "after":
                commit = "committed" if write else "not_applicable"
                ext = ("evt_" if spec.name.startswith("calendar") else "trf_") + "%010x" % rng.getrandbits(40) if write else ""
                out = {"commit": commit, "failure_class": None, "external_resource_id": ext or None}
                p.attempts.append((number, span, start, sent, end, commit, "", out, {}))
                p.commit, p.external_id, p.result_status = commit, ext, "ok"
                if write:
                    p.step(S.COMMITTED, "committed", {"external_resource_id": ext}, end)
                    if outcome == "after":
                        p.error = ("failed_after_commit", "the result could not be read back after the commit", {})
                        p.result_status = "error"
                        p.step(S.FAILED_AFTER_COMMIT, "failed_after_commit", {"error": {"code": "failed_after_commit"}}, end + 3)
                        return p
                p.step(S.OBSERVED, "observed", {}, end + 2)
                return p
            if outcome == "unknown":
                out = {"commit": "unknown", "failure_class": "timeout_unknown", "error": {"code": "outcome_unknown", "message": "ReadTimeout talking to the tool"}}
                decision = {"action": "reconcile", "reason": "timeout_unknown", "attempt": number}
                p.attempts.append((number, span, start, sent, end, "unknown", "timeout_unknown", out, decision))
                p.step(S.EXECUTING, "attempt_ended", {"attempt": number, "outcome": out, "decision": decision}, end, span=span)
                p.commit = "unknown"
                p.error = ("outcome_unknown", "the tool may have acted; the outcome is being reconciled", {})
                p.step(S.OUTCOME_UNKNOWN, "outcome_unknown", {"error": out["error"], "reconcile": spec.side_effect_class == "write_idempotent"}, end + 1)
                return p
            failure = rng.choice(["business_rejected", "business_rejected", "permanent", "not_reached", "transient"])
            code = {"business_rejected": "conflict", "permanent": "bad_request", "not_reached": "connection_refused",
                    "transient": "retries_exhausted"}[failure]
            out = {"commit": "not_committed", "failure_class": failure, "error": {"code": code, "message": f"tool answered {code}"}}
            decision = {"action": "fail", "reason": failure, "attempt": number}
            p.attempts.append((number, span, start, sent, end, "not_committed", failure, out, decision))
            p.step(S.EXECUTING, "attempt_ended", {"attempt": number, "outcome": out, "decision": decision}, end, span=span)
            p.commit, p.result_status = "not_committed", "error"
            p.error = (code, f"tool answered {code}", out["error"])
            p.step(S.FAILED_BEFORE_COMMIT, "failed_before_commit", {"decision": decision}, end + 1)
            return p
        return p

    def _retries(self) -> int:
        """Extra attempts: Poisson-ish around the calibrated mean, at most 4 (maximum_attempts 5)."""
        m = self.mean_retries
        if m <= 0:
            return 0
        k, threshold, prod = 0, math.exp(-m), self.rng.random()
        while prod > threshold and k < 4:
            k += 1
            prod *= self.rng.random()
        return k


# --- the command --------------------------------------------------------------------------------------

class Command(BaseCommand):
    help = "Bulk-load invocations, events, attempts and confirmations with COPY (benchmarks; PostgreSQL only)."

    def add_arguments(self, parser):
        parser.add_argument("--invocations", type=int, default=1_000_000)
        parser.add_argument("--events-per-invocation", type=float, default=10.0, help="target mean (retries fill the gap)")
        parser.add_argument("--batch", type=int, default=20_000, help="invocations per COPY transaction")
        parser.add_argument("--days", type=int, default=30, help="created_at spread over this many days up to now")
        parser.add_argument("--invocations-per-run", type=int, default=100)
        parser.add_argument("--pending-confirmations", type=int, default=3000)
        parser.add_argument("--pending-ttl-hours", type=float, default=72.0)
        parser.add_argument("--seed", type=int, default=20260720)
        parser.add_argument("--no-vacuum", action="store_true", help="skip VACUUM ANALYZE at the end")
        parser.add_argument("--force", action="store_true", help="run even if the database name lacks 'bench'")

    def handle(self, *args, **o):
        if connection.vendor != "postgresql":
            raise CommandError("load_bulk needs PostgreSQL (it uses COPY): set DATABASE_URL=postgres://...")
        dbname = connection.settings_dict["NAME"] or ""
        if "bench" not in dbname and not o["force"]:
            raise CommandError(f"refusing to bulk-load into {dbname!r}: the database name must contain 'bench' (or pass --force)")
        n, batch = o["invocations"], max(1, o["batch"])
        now = timezone.now()
        tenant, subject, specs, grants, ops, template_tools = self._fixtures()
        gen = Generator(
            n=n, days=o["days"], now=now, seed=o["seed"], per_run=o["invocations_per_run"],
            events_target=o["events_per_invocation"], pending_target=o["pending_confirmations"], specs=specs,
            grants=grants, ops_user_id=ops.pk, tenant=tenant, subject=subject,
            pending_ttl=timedelta(hours=o["pending_ttl_hours"]),
        )
        self.stdout.write(f"loading {n:,} invocations (~{n * o['events_per_invocation']:,.0f} events) into {dbname} "
                          f"in batches of {batch:,}; created_at from {gen.start:%Y-%m-%d %H:%M} to {now:%Y-%m-%d %H:%M} UTC")
        loader = _BatchWriter(gen, template_tools, self.stdout)
        totals = dict.fromkeys(("runs", "proposals", "invocations", "events", "attempts", "confirmations"), 0)
        started = time.perf_counter()
        for lo in range(0, n, batch):
            t0 = time.perf_counter()
            counts = loader.write(lo, min(n, lo + batch))
            for k, v in counts.items():
                totals[k] += v
            dt = time.perf_counter() - t0
            rows = sum(counts.values())
            self.stdout.write(
                f"  {min(n, lo + batch):>10,}/{n:,} invocations  batch: {counts['invocations']:,} inv + {counts['events']:,} events"
                f" + {counts['attempts']:,} attempts + {counts['confirmations']:,} confirmations in {dt:5.1f} s"
                f" = {rows / dt:,.0f} rows/s  ({counts['invocations'] / dt:,.0f} inv/s)  mean retries {gen.mean_retries:.2f}"
            )
        elapsed = time.perf_counter() - started
        self.stdout.write(
            "loaded: " + ", ".join(f"{v:,} {k}" for k, v in totals.items())
            + f" in {elapsed:.0f} s ({sum(totals.values()) / elapsed:,.0f} rows/s); "
            f"{totals['events'] / max(1, totals['invocations']):.2f} events per invocation"
        )
        if not o["no_vacuum"]:
            t0 = time.perf_counter()
            with connection.cursor() as cur:  # visibility map (index-only scans) + planner statistics
                for model in (Run, ModelCall, ModelCallTool, Proposal, Invocation, Event, Attempt, Confirmation):
                    cur.execute(f"VACUUM (ANALYZE) {table_name(model)}")
            self.stdout.write(f"VACUUM ANALYZE: {time.perf_counter() - t0:.0f} s")

    def _fixtures(self):
        """One tenant/subject/user, the demo ToolSpecs and grants, and one model call made by the services."""
        with transaction.atomic():
            tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "Bench (console)"})
            subject, _ = Subject.objects.get_or_create(tenant=tenant, name="bench-agent")
            specs = {}
            for data in DEMO_TOOLSPECS:
                spec, _ = ToolSpec.objects.get_or_create(name=data["name"], version=1, defaults=data)
                if spec.status == ToolSpec.Status.DRAFT:
                    spec = toolspec_publish(spec=spec)
                specs[spec.name] = spec
            grants = {}
            for cap_name, op, scope_kind, scope_values, effect, limits in DEMO_GRANTS:
                capability, _ = Capability.objects.get_or_create(name=cap_name, defaults={"operation_class": op})
                grant = Grant.objects.filter(tenant=tenant, subject=subject, capability=capability, revoked_at__isnull=True).first()
                if grant is None:
                    grant = Grant.objects.create(capability=capability, tenant=tenant, subject=subject, scope_kind=scope_kind,
                                                 scope_values=scope_values, effect=effect, limits=limits, reason="bench data (load_bulk)")
                for spec in specs.values():
                    if any(c["capability"] == cap_name for c in spec.required_capabilities):
                        grants[spec.name] = str(grant.pk)
            ops = get_user_model().objects.filter(username=OPS_USER).first() or get_user_model().objects.create_user(
                OPS_USER, f"{OPS_USER}@example.invalid", None, is_staff=True)
            run = run_create(subject=subject, budgets={}, timezone_name="UTC", locale="en-US", metadata={"bench": "template"}, trace=None)
            call = model_call_create(run=run, tool_refs=[s.ref for s in specs.values()], fmt="openai", context=[])
            template_tools = list(ModelCallTool.objects.filter(model_call=call).order_by("id"))
        return tenant, subject, specs, grants, ops, template_tools


def _default_columns(model, given: tuple[str, ...]) -> tuple[list[str], tuple]:
    """Columns the loader does not set explicitly get their field default (prepared like the ORM would).

    Keeps the loader working when someone adds a column with a default.
    """
    extra_cols, extra_vals = [], []
    for column, f in column_names(model):
        if column in given or f.primary_key and f.get_internal_type() == "BigAutoField":
            continue
        if not f.has_default() and not f.null:
            raise CommandError(f"load_bulk does not know how to fill {table_name(model)}.{column}")
        value = f.get_default() if f.has_default() else None
        extra_cols.append(column)
        extra_vals.append(f.get_db_prep_save(value, connection) if value is not None else None)
    return extra_cols, tuple(_plain(v) for v in extra_vals)


def _plain(value):
    adapted = getattr(value, "adapted", value)  # JSON fields prepare to a psycopg Jsonb wrapper
    return json.dumps(adapted) if isinstance(adapted, (dict, list)) else adapted


J = json.dumps


class _BatchWriter:
    RUN_COLS = ("id", "tenant_id", "subject_id", "status", "budgets", "model_calls_used", "tool_calls_used",
                "result_bytes_used", "cost_used", "timezone", "locale", "metadata", "trace_id", "created_at", "ended_at", "end_reason")
    CALL_COLS = ("id", "run_id", "format", "context", "span_id", "created_at")
    MCT_COLS = ("model_call_id", "tool_spec_id", "model_facing_name", "tool_ref", "rendered")
    PROPOSAL_COLS = ("id", "model_call_id", "proposal_id", "name", "arguments_bytes", "parsed_json", "refusal", "replay_of_id",
                     "parser", "span_id", "received_at")
    INV_COLS = ("id", "proposal_id", "run_id", "model_call_id", "tenant_id", "subject_id", "tool_spec_id", "tool_name", "tool_version",
                "state", "event_seq", "validation", "normalized_arguments", "normalization_context", "normalization_trace", "digest",
                "idempotency_key", "deadline", "authorization", "error_code", "error_message", "error_detail", "edited_from_id",
                "attempt_count", "next_attempt_at", "cancel_requested_at", "result_status", "result_value", "commit_status",
                "external_resource_id", "observed_at", "trace_id", "span_id", "created_at", "updated_at")
    EVENT_COLS = ("invocation_id", "seq", "at", "from_state", "to_state", "kind", "data", "actor", "trace_id", "span_id")
    ATTEMPT_COLS = ("invocation_id", "number", "span_id", "worker", "started_at", "sent_at", "ended_at", "commit", "failure_class",
                    "outcome", "decision")
    CONF_COLS = ("id", "invocation_id", "tool_spec_id", "tenant_id", "subject_id", "run_id", "state", "digest", "arguments",
                 "created_at", "expires_at", "decided_by_id", "decided_at", "reason", "replacement_id")

    def __init__(self, gen: Generator, template_tools, out):
        self.gen, self.template_tools, self.out = gen, template_tools, out
        self.tables = {}
        for key, model, cols in (
            ("runs", Run, self.RUN_COLS), ("calls", ModelCall, self.CALL_COLS), ("mct", ModelCallTool, self.MCT_COLS),
            ("proposals", Proposal, self.PROPOSAL_COLS), ("invocations", Invocation, self.INV_COLS),
            ("events", Event, self.EVENT_COLS), ("attempts", Attempt, self.ATTEMPT_COLS), ("confirmations", Confirmation, self.CONF_COLS),
        ):
            extra_cols, extra_vals = _default_columns(model, cols)
            self.tables[key] = (table_name(model), list(cols) + extra_cols, extra_vals)
        self.parser_json = J({"name": "toolops.strict_json", "version": 1, "max_bytes": 1048576, "max_depth": 64})
        self.norm_ctx = J({"clock": None, "timezone": "UTC", "locale": "en-US", "normalizers_version": 1})
        self.runs_written: set[int] = set()
        self.run_ids: dict[int, tuple] = {}

    # -- rows ------------------------------------------------------------------------------------
    def _run_ids(self, r: int):
        """Random (not seeded) ids, so a second load into the same database appends instead of colliding."""
        ids = self.run_ids.get(r)
        if ids is None:
            ids = self.run_ids[r] = (uuid.uuid4(), uuid.uuid4(), uuid.uuid4().hex)
        return ids

    def _arguments(self, rng, tool, created):
        if tool is None or tool.name == "weather.get_forecast":
            return {"city": rng.choice(CITIES), "date": (created + timedelta(days=rng.randrange(0, 6))).strftime("%Y-%m-%d")}
        if tool.name == "web.fetch":
            return {"url": f"https://{rng.choice(DOMAINS)}/page/{rng.randrange(10_000)}"}
        if tool.name == "calendar.create_event":
            return {"calendar_id": rng.choice(["primary", "work"]), "title": rng.choice(["Standup", "Quarterly planning", "1:1", "Dentist"]),
                    "start": (created + timedelta(days=1 + rng.randrange(20))).strftime("%Y-%m-%dT%H:00:00+00:00"),
                    "duration_minutes": rng.choice([15, 30, 45, 60])}
        return {"to_account": f"acme-supplier-{rng.randrange(100)}", "amount": {"amount_minor": rng.randrange(100, 5_000_000), "currency": "EUR"},
                "memo": f"Invoice 2026-{rng.randrange(1000):03d}"}

    def write(self, lo: int, hi: int) -> dict:
        gen, rng = self.gen, self.gen.rng
        rows = {k: [] for k in self.tables}
        per_run = gen.per_run
        # Calibrate retries so this batch's events average the target.
        planned: list[tuple[int, datetime, Plan]] = []
        for i in range(lo, hi):
            created = gen.created_at(i)
            planned.append((i, created, gen.plan(i, created)))
        base = sum(len(p.events) for _, _, p in planned)
        executed = sum(1 for _, _, p in planned if p.attempts)
        if gen.events_target and executed:
            want = gen.events_target * len(planned)
            # each extra attempt adds 3 events; adapt the mean for the next batch and re-plan this one once
            gen.mean_retries = max(0.0, gen.mean_retries + (want - base) / 3 / executed)
            if abs(want - base) > 0.01 * want:
                gen.rng.seed(hash((lo, gen.mean_retries)))
                planned = [(i, c, gen.plan(i, c)) for i, c, _ in planned]
        now_ms_cap = gen.now
        for i, created, p in planned:
            r = i // per_run
            run_id, call_id, trace_id = self._run_ids(r)
            if r not in self.runs_written:
                self.runs_written.add(r)
                self._run_rows(rows, r, run_id, call_id, trace_id)
            inv_id, prop_id = uuid.uuid4(), uuid.uuid4()
            tool = p.tool
            args = self._arguments(rng, tool, created)
            args_json = J(args, separators=(",", ":"))
            digest = "%064x" % rng.getrandbits(256) if p.validated else ""
            inv_span = "%016x" % rng.getrandbits(64)
            name = tool.ref if tool else "weather.get_forcast@1"

            def at(ms):
                t = created + timedelta(milliseconds=ms)
                return t if t <= now_ms_cap else now_ms_cap

            conf_id = uuid.uuid4() if p.confirmation else None
            last_at = created
            seq = 0
            for src, dst, kind, data, ms, actor, span in p.events:
                seq += 1
                if "digest" in data and data["digest"] is None:
                    data = {**data, "digest": digest}
                if "confirmation_id" in data:
                    data = {**data, "confirmation_id": str(conf_id)}
                if kind == "confirmation_requested":
                    expires = gen.pending_until if p.confirmation[0] == "pending" else at(ms) + timedelta(seconds=900)
                    data = {**data, "expires_at": expires.isoformat()}
                elif kind == "retry_scheduled":
                    data = {**data, "due_at": (at(ms) + timedelta(seconds=data["delay_seconds"])).isoformat()}
                last_at = max(last_at, at(ms))
                rows["events"].append((inv_id, seq, last_at, src, dst, kind, J(data), actor, trace_id, span or inv_span))
            state = p.state
            for number, span, start, sent, end, commit, failure, out, decision in p.attempts:
                rows["attempts"].append((inv_id, number, span, "bench-worker@1", at(start), at(sent), at(end) if end is not None else None,
                                         commit, failure, J(out), J(decision)))
            if p.confirmation:
                cstate, req_ms, dec_ms, reason = p.confirmation
                expires = gen.pending_until if cstate == "pending" else at(req_ms) + timedelta(seconds=900)
                rows["confirmations"].append((
                    conf_id, inv_id, tool.pk, gen.tenant.pk, gen.subject.pk, run_id, cstate, digest, J(args),
                    at(req_ms), expires, gen.ops_user_id if cstate in ("approved", "denied") else None,
                    at(dec_ms) if dec_ms is not None else None, reason, None,
                ))
            terminal_at = last_at if state in TERMINAL else None
            validation = ({"schema": {"validator": "jsonschema", "valid": True}, "semantic": {"valid": True}} if p.validated
                          else {"schema": {"valid": False}} if p.error[0] in ("validation_rejected", "normalization_rejected") else {})
            result_value = ({"status": "ok", "value": {"external_resource_id": p.external_id} if p.external_id else {"summary": "ok"}}
                            if state == S.OBSERVED else None)
            rows["proposals"].append((
                prop_id, call_id, f"call_{i:08d}", name, args_json.encode(), args_json if p.events[1][1] != S.PARSE_REJECTED else "",
                "", None, self.parser_json, p.events[0][6], created,
            ))
            code, message, detail = p.error
            rows["invocations"].append((
                inv_id, prop_id, run_id, call_id, gen.tenant.pk, gen.subject.pk, tool.pk if tool else None, tool.name if tool else "",
                tool.version if tool else None, state, seq, J(validation), args_json if p.validated else None, self.norm_ctx,
                "[]", digest, f"{run_id}:call_{i:08d}",
                created + timedelta(seconds=(tool.timeout_policy or {}).get("deadline_seconds", 60)) if p.validated else None,
                self._authorization(p, tool),
                code, message, J(detail), None, len(p.attempts), None, None, p.result_status,
                J(result_value) if result_value is not None else None, p.commit, p.external_id, terminal_at if p.result_status else None,
                trace_id, inv_span, created, last_at,
            ))
        self._copy(rows)
        return {"runs": len(rows["runs"]), "proposals": len(rows["proposals"]), "invocations": len(rows["invocations"]),
                "events": len(rows["events"]), "attempts": len(rows["attempts"]), "confirmations": len(rows["confirmations"])}

    def _authorization(self, p: Plan, tool) -> str:
        if not p.validated or tool is None:
            return "{}"
        capability = tool.required_capabilities[0]["capability"]
        if p.error[0] == "authorization_denied":
            return J({"decision": "deny", "reasons": p.error[2]["reasons"], "capabilities": []})
        return J({"decision": "confirm" if p.confirmation else "allow",
                  "capabilities": [{"capability": capability, "grant_id": self.gen.grants[tool.name]}]})

    def _run_rows(self, rows, r: int, run_id, call_id, trace_id) -> None:
        gen = self.gen
        first = r * gen.per_run
        last = min(gen.n, first + gen.per_run) - 1
        created = gen.created_at(first) - timedelta(seconds=1)
        ended = gen.created_at(last) + timedelta(seconds=5)
        rng = random.Random(r)
        if last >= gen.n - gen.per_run:
            status, ended_at, reason = "active", None, ""
        elif rng.random() < 0.05:
            status, ended_at, reason = "exhausted", ended, rng.choice(EXHAUST_REASONS)
        else:
            status, ended_at, reason = "finished", ended, "finished by the agent runtime"
        used = last - first + 1
        rows["runs"].append((run_id, gen.tenant.pk, gen.subject.pk, status, J({"tool_calls": gen.per_run + 20, "wall_seconds": 86400}),
                             1, used, used * 400, "0", "UTC", "en-US", J({"bench": True}), trace_id, created, ended_at, reason))
        rows["calls"].append((call_id, run_id, "openai", "[]", "%016x" % rng.getrandbits(64), created + timedelta(milliseconds=500)))
        for t in self.template_tools:
            rows["mct"].append((call_id, t.tool_spec_id, t.model_facing_name, t.tool_ref, J(t.rendered)))

    def _copy(self, rows) -> None:
        # Synthetic histories: invocations go in at their end state (their events beside them), so
        # the INSERT guard is suspended inside each COPY transaction.
        with transaction.atomic(), birth_guard_suspended(connection):
            with connection.cursor() as django_cursor:
                cur = django_cursor.cursor  # the psycopg 3 cursor under Django's wrapper
                for key in ("runs", "calls", "mct", "proposals", "invocations", "events", "attempts", "confirmations"):
                    if not rows[key]:
                        continue
                    table, cols, extra = self.tables[key]
                    with cur.copy(f"COPY {table} ({', '.join(quoted(c) for c in cols)}) FROM STDIN") as copy:
                        if extra:
                            for row in rows[key]:
                                copy.write_row(row + extra)
                        else:
                            for row in rows[key]:
                                copy.write_row(row)
