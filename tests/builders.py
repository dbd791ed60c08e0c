"""Keyword-only builders for test data, in one module (instead of copy-pasted setup).

- rows: ``make_tenant``, ``make_subject``, ``make_token``, ``make_capability``, ``make_grant``,
  ``make_staff``, ``make_approver`` (staff with a personal token, allowed to approve);
  ``forget_rate_counts`` (the shared cache's per-token rate counts of the current window);
  permissions: ``allow_approving``, ``allow_resolving`` (a (tenant, ToolSpec) pair);
- ToolSpecs: ``make_toolspec`` (the weather tool by default), ``make_demo_spec`` (the demo
  set, optionally copied under another name or changed), ``make_calendar_spec`` (a small calendar
  tool with two properties);
- calls: ``admit_proposal`` (one proposal through the admission service), ``Agent`` (an API
  client for one subject), ``OneRun`` (several proposals in one run, e.g. for standing approvals);
- approval policies: ``PAYMENTS_POLICY``, ``make_payments_spec``, ``make_finance_subject``, ``payment_args``;
- worlds: ``PlantedWorld`` (rows planted directly, with chosen timestamps), ``ServiceWorld``
  (histories made through the services with in-process executors), ``RunWorld`` (one run and
  model call whose VALIDATED invocations are inserted directly).
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import uuid
from datetime import timedelta

from django.contrib.auth.models import User
from django.core.cache import caches
from django.db import connection, transaction
from django.test import Client, override_settings
from django.utils import timezone
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from invocations_app import admission, runs
from invocations_app.confirmations import confirmation_approve
from worker.attempt import execution_run
from worker.claim import execution_claim
from invocations_app.models import Attempt, Confirmation, Invocation, ModelCall, Proposal, Run
from devtools.demo import DEMO_TOOLSPECS
from specs_app.models import ApiToken, Capability, Grant, PersonalToken, Subject, Tenant, ToolSpec
from specs_app.selectors import grant_snapshots
from specs_app.services import api_token_issue, personal_token_issue, toolspec_publish
from toolops.db_guards import birth_guard_suspended
from toolops.throttling import token_rate_window
from toolops.decisions.execution import Commit, ExecutionOutcome, LookupOutcome
from toolops.runtime.states import State

_seq = itertools.count(1)

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def make_tenant(*, slug: str | None = None) -> Tenant:
    slug = slug or f"tenant-{next(_seq)}"
    return Tenant.objects.create(slug=slug, name=slug.title())


def make_subject(*, tenant: Tenant | None = None, name: str | None = None) -> Subject:
    return Subject.objects.create(tenant=tenant or make_tenant(), name=name or f"agent-{next(_seq)}")


def make_token(*, subject: Subject | None = None) -> tuple[Subject, str]:
    subject = subject or make_subject()
    _, secret = api_token_issue(subject=subject, label="test")
    return subject, secret


def forget_rate_counts(*, rate: str) -> None:
    """Drop every token's count in the current window of ``rate`` (``TOOLOPS_API_RATE``'s form):
    the test database restarts its id sequences each run, the shared cache does not forget."""
    token_ids = [*ApiToken.objects.values_list("pk", flat=True),
                 *(f"person:{pk}" for pk in PersonalToken.objects.values_list("pk", flat=True))]
    with override_settings(TOOLOPS_API_RATE=rate):
        caches["shared"].delete_many([token_rate_window(token_id).key for token_id in token_ids])


def make_toolspec(
    *,
    name: str = "weather.get_forecast",
    version: int = 1,
    schema: dict | None = None,
    normalizers: list | None = None,
    side_effect_class: str = "read_only",
    format_assertion: bool = False,
    publish: bool = True,
    required_capabilities: list | None = None,
    **extra,
) -> ToolSpec:
    if required_capabilities is None:
        make_capability(name="weather.read", operation_class="read")
        required_capabilities = [{"capability": "weather.read", "resource_pointer": "/city"}]
    spec = ToolSpec.objects.create(
        required_capabilities=required_capabilities,
        name=name,
        version=version,
        description=f"{name} for tests",
        input_schema=schema
        or {
            "$schema": DIALECT,
            "type": "object",
            "properties": {"city": {"type": "string"}, "date": {"type": "string", "format": "date"}},
            "required": ["city", "date"],
            "additionalProperties": False,
        },
        normalizers=[{"pointer": "/date", "normalizer": "date"}] if normalizers is None else normalizers,
        side_effect_class=side_effect_class,
        format_assertion=format_assertion,
        **extra,
    )
    return toolspec_publish(spec=spec) if publish else spec


# The operation class of each capability the demo ToolSpecs require.
DEMO_CAPABILITIES = {"calendar.write": "create", "payments.transfer": "create", "weather.read": "read", "web.read": "read"}

CALENDAR_ARGS = {
    "calendar_id": "primary", "title": "Quarterly planning", "start": "2026-07-21T09:00:00+02:00", "duration_minutes": 45,
}
PASSWORD = "correct horse battery staple"


def demo_toolspec_data(*, name: str) -> dict:
    """A deep copy of one of the demo ToolSpecs' fields (``devtools.demo``)."""
    return copy.deepcopy(next(d for d in DEMO_TOOLSPECS if d["name"] == name))


def make_demo_spec(*, name: str, version: int = 1, copy_as: str | None = None, four_eyes: bool = False,
                   **overrides) -> ToolSpec:
    """Publish ``version`` of the demo ToolSpec ``name`` (docs/reference/demo.md), creating its capabilities.

    ``copy_as`` publishes it under another name; ``four_eyes`` adds ``four_eyes_resolution`` to
    its confirmation policy; other keywords replace fields (``expired_key_policy=...``).
    """
    data = demo_toolspec_data(name=name)
    if four_eyes:
        data["confirmation_policy"] = {**data.get("confirmation_policy", {}), "four_eyes_resolution": True}
    data.update(overrides, **({"name": copy_as} if copy_as else {}))
    for entry in data["required_capabilities"]:
        make_capability(name=entry["capability"], operation_class=DEMO_CAPABILITIES[entry["capability"]])
    return toolspec_publish(spec=ToolSpec.objects.create(version=version, **data))


CALENDAR_ID_NORMALIZER = {"pointer": "/calendar_id", "normalizer": "identifier", "options": {"trim": True, "casefold": True}}


def make_calendar_spec(*, confirm_seconds: int | None = 60, open_schema: bool = False,
                       side_effect_class: str = "write_idempotent", **extra) -> ToolSpec:
    """A small ``calendar.create_event@1`` (``calendar_id``, ``title``) needing calendar.write on /calendar_id.

    Closed schema (default): both properties required, nothing else, ``calendar_id`` trimmed and
    casefolded. ``open_schema``: only ``calendar_id`` required, extra properties let through and
    no normalizer (so a claimed identity in the arguments reaches admission).
    ``confirm_seconds``: a human must confirm within that many seconds; ``None``: no confirmation policy.
    Other keywords go to ``make_toolspec`` (``executor=...``).
    """
    make_capability(name="calendar.write", operation_class="create")
    if confirm_seconds is not None:
        extra["confirmation_policy"] = {"required": True, "expires_seconds": confirm_seconds}
    return make_toolspec(
        name="calendar.create_event",
        schema={
            "$schema": DIALECT,
            "type": "object",
            "properties": {"calendar_id": {"type": "string"}, "title": {"type": "string"}},
            "required": ["calendar_id"] if open_schema else ["calendar_id", "title"],
            "additionalProperties": open_schema,
        },
        normalizers=[] if open_schema else [CALENDAR_ID_NORMALIZER],
        side_effect_class=side_effect_class,
        required_capabilities=[{"capability": "calendar.write", "resource_pointer": "/calendar_id"}],
        **extra,
    )


def make_capability(*, name: str, operation_class: str = "read") -> Capability:
    return Capability.objects.get_or_create(name=name, defaults={"operation_class": operation_class})[0]


def make_grant(
    *,
    capability: str = "weather.read",
    operation_class: str = "read",
    tenant: Tenant | None = None,
    subject: Subject | None = None,
    scope_kind: str = "any",
    scope_values: list | None = None,
    effect: str = "allow",
    limits: dict | None = None,
    tool_refs: list | None = None,
    **extra,
) -> Grant:
    return Grant.objects.create(
        capability=make_capability(name=capability, operation_class=operation_class),
        tenant=tenant or subject.tenant, subject=subject, scope_kind=scope_kind, scope_values=scope_values or [],
        effect=effect, limits=limits or {}, tool_refs=tool_refs or [], reason="test grant", **extra,
    )


# "payments ≤ 10 EUR auto, ≤ 500 EUR one approver, above that two" (minor units), escalated after 10 min.
PAYMENTS_POLICY = {
    "currency": "EUR",
    "thresholds": [{"up_to": 1000, "effect": "allow"}, {"up_to": 50000, "effect": "confirm"},
                   {"effect": "confirm", "approvals": 2}],
}


def make_payments_spec(**overrides) -> ToolSpec:
    """The demo ``payments.transfer@1`` without its "always confirm" floor, so a policy alone decides."""
    return make_demo_spec(name="payments.transfer", **{"confirmation_policy": {"expires_seconds": 900}, **overrides})


def make_finance_subject(*, policy: dict | None = None) -> Subject:
    """``acme/finance-bot`` holding payments.transfer under ``policy`` (``PAYMENTS_POLICY`` by default)."""
    subject = make_subject(tenant=make_tenant(slug="acme"), name="finance-bot")
    make_grant(subject=subject, capability="payments.transfer", operation_class="create",
               approval_policy=PAYMENTS_POLICY if policy is None else policy)
    return subject


def payment_args(minor: int, *, to_account: str = "acme-supplier-42", currency: str = "EUR") -> dict:
    """Transfer arguments whose normalized amount is ``minor`` minor units (two decimals)."""
    return {"to_account": to_account, "amount": {"amount": f"{minor // 100}.{minor % 100:02d}", "currency": currency}}


class OneRun:
    """One run (optionally ``on_behalf_of`` a person) and one model call showing ``spec``; ``propose`` admits a call."""

    def __init__(self, *, subject: Subject, spec: ToolSpec, on_behalf_of: str = ""):
        self.subject, self.spec, self._n = subject, spec, 0
        self.run = runs.run_create(subject=subject, budgets={}, timezone_name="Europe/Paris", locale="en-US", metadata={},
                                   trace=None, on_behalf_of=on_behalf_of)
        self.call = runs.model_call_create(run=self.run, tool_refs=[spec.ref], fmt="openai", context=[])

    def propose(self, arguments: dict) -> Invocation:
        self._n += 1
        invocation, _ = admission.proposal_admit(
            model_call=self.call, subject=self.subject, proposal_id=f"call_{self._n}", name=self.spec.ref,
            arguments_bytes=json.dumps(arguments).encode(),
        )
        return invocation


class Agent:
    """An API client for one subject: wraps DRF's APIClient with the bearer token."""

    def __init__(self, client, token: str):
        self.client, self.token = client, token

    def _auth(self, headers):
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}", **(headers or {})}

    def get(self, path, headers=None, **params):
        return self.client.get(path, params, **self._auth(headers))

    def post(self, path, body=None, headers=None):
        return self.client.post(path, json.dumps(body or {}), content_type="application/json", **self._auth(headers))

    def run(self, **body) -> dict:
        resp = self.post("/api/v1/runs", {"timezone": "Asia/Shanghai", **body})
        assert resp.status_code == 201, resp.content
        return resp.json()

    def model_call(self, run_id: str, **body) -> dict:
        resp = self.post(f"/api/v1/runs/{run_id}/model-calls", body)
        assert resp.status_code == 201, resp.content
        return resp.json()

    def propose(self, model_call_id: str, *, name: str, arguments: str | None = None, proposal_id: str | None = None,
                headers: dict | None = None, **extra):
        body = {"proposal_id": proposal_id or f"call_{next(_seq)}", "name": name, **extra}
        if arguments is not None:
            body["arguments"] = arguments
        return self.post(f"/api/v1/model-calls/{model_call_id}/proposals", body, headers=headers)


def make_staff(*, username: str, superuser: bool = False) -> User:
    """A staff user (or superuser) who signs in with ``PASSWORD``."""
    if superuser:
        return User.objects.create_superuser(username, f"{username}@example.invalid", PASSWORD)
    return User.objects.create_user(username, f"{username}@example.invalid", PASSWORD, is_staff=True)


def make_person(*, username: str, tenant: Tenant) -> User:
    """A staff user who is a person of ``tenant`` (``view_calls`` on it): a run can act for them."""
    user = make_staff(username=username)
    assign_perm("specs_app.view_calls", user, tenant)
    return user


def _allow(user, *, tool_permission: str, tenant_permission: str, spec: ToolSpec | None, tenant: Tenant | None) -> None:
    # None: the permission held model-wide (every ToolSpec / every tenant).
    assign_perm(f"specs_app.{tool_permission}", user, *([spec] if spec is not None else []))
    assign_perm(f"specs_app.{tenant_permission}", user, *([tenant] if tenant is not None else []))


def allow_approving(*, user, spec: ToolSpec | None = None, tenant: Tenant | None = None) -> None:
    """Let ``user`` see and decide confirmations of ``spec`` (None: every tool) in ``tenant`` (None: every tenant)."""
    _allow(user, tool_permission="approve_toolspec", tenant_permission="approve_calls", spec=spec, tenant=tenant)


def allow_resolving(*, user, spec: ToolSpec | None = None, tenant: Tenant | None = None) -> None:
    """Let ``user`` see and resolve unknown outcomes of ``spec`` (None: every tool) in ``tenant`` (None: every tenant)."""
    _allow(user, tool_permission="resolve_toolspec", tenant_permission="resolve_calls", spec=spec, tenant=tenant)


def make_approver(*, username: str, spec: ToolSpec | None = None) -> tuple[User, str]:
    """A staff user with a personal (Approvals API) token; ``approve_toolspec`` on ``spec`` when given."""
    user = make_staff(username=username)
    if spec is not None:
        allow_approving(user=user, spec=spec)
    _, secret = personal_token_issue(user=user, label="test")
    return user, secret


def person_client(*, username: str, spec: ToolSpec | None = None) -> User:
    """``make_approver``, with their Approvals API client as ``user.client``."""
    user, secret = make_approver(username=username, spec=spec)
    user.client = Agent(APIClient(), secret)
    return user


def agent_client(*, subject: Subject) -> Agent:
    """An agent API client for ``subject`` (a fresh token), with ``agent.subject`` set."""
    subject, secret = make_token(subject=subject)
    agent = Agent(APIClient(), secret)
    agent.subject = subject
    return agent


def make_planner(*, tenant_slug: str = "acme", name: str = "planner") -> Subject:
    """An agent of ``tenant_slug`` that may write to the ``primary`` calendar (and nothing else)."""
    subject = make_subject(tenant=make_tenant(slug=tenant_slug), name=name)
    make_grant(subject=subject, capability="calendar.write", operation_class="create", scope_kind="exact", scope_values=["primary"])
    return subject


def pending_confirmation(*, subject: Subject, spec: ToolSpec, arguments: dict) -> Confirmation:
    """A call of ``spec`` admitted for ``subject`` and waiting for a person: its pending confirmation."""
    invocation = admit_proposal(subject=subject, spec=spec, arguments=arguments)
    assert invocation.state == "AUTHORIZED", invocation.error_message
    return Confirmation.objects.select_related("invocation").get(invocation=invocation, state="pending")


def logged_in_client(user) -> Client:
    """A console client signed in as ``user`` (no password round trip)."""
    client = Client()
    client.force_login(user)
    return client


def messages_of(response) -> list[str]:
    """The console's flash messages on a response (followed redirects included)."""
    return [str(m) for m in response.context["messages"]]


def admit_proposal(*, subject: Subject, spec: ToolSpec, arguments: dict, timezone_name: str = "Europe/Paris") -> Invocation:
    """One model call showing ``spec`` and one proposal of ``arguments``, through the admission service."""
    run = runs.run_create(subject=subject, budgets={}, timezone_name=timezone_name, locale="en-US", metadata={}, trace=None)
    call = runs.model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])
    invocation, _ = admission.proposal_admit(
        model_call=call, subject=subject, proposal_id="call_1", name=spec.ref,
        arguments_bytes=json.dumps(arguments).encode(),
    )
    return invocation


def fresh(inv: Invocation) -> Invocation:
    """The invocation as stored now."""
    return Invocation.objects.select_related("tool_spec", "proposal").get(pk=inv.pk)


# --- worlds ------------------------------------------------------------------------------------


class PlantedWorld:
    """One tenant, subject, run and model call; ``invocation()`` plants one call with its timestamps.

    Rows are written directly (the way a history looks, not how the services build it).
    """

    def __init__(self):
        self.now = timezone.now()
        self.tenant = make_tenant(slug="acme")
        self.subject = make_subject(tenant=self.tenant, name="planner")
        self.weather = make_demo_spec(name="weather.get_forecast")
        self.calendar = make_demo_spec(name="calendar.create_event")
        self.run = self.make_run()
        self.call = ModelCall.objects.create(run=self.run, span_id="0" * 16)
        self._n = 0

    def make_run(self, *, status: str = Run.Status.ACTIVE, ended_ago: timedelta | None = None, reason: str = "") -> Run:
        run = Run.objects.create(tenant=self.tenant, subject=self.subject, trace_id="1" * 32, status=status, end_reason=reason,
                                 ended_at=self.now - ended_ago if ended_ago is not None else None)
        return run

    def invocation(self, state: str, *, spec: ToolSpec | None = None, ago: timedelta = timedelta(hours=2),
                   attempts: tuple[str, ...] = ()) -> Invocation:
        """``attempts``: one failure class per attempt ("" = ended fine, "running" = not ended)."""
        self._n += 1
        spec = spec or self.weather
        proposal = Proposal.objects.create(model_call=self.call, proposal_id=f"call_{self._n}", name=spec.ref,
                                           arguments_bytes=b"{}", span_id="2" * 16)
        with transaction.atomic(), birth_guard_suspended(connection):  # a history's end state, without the history
            inv = Invocation.objects.create(
                proposal=proposal, run=self.run, model_call=self.call, tenant=self.tenant, subject=self.subject, tool_spec=spec,
                tool_name=spec.name, tool_version=spec.version, state=state, trace_id="1" * 32, span_id="3" * 16,
            )
        created = self.now - ago
        Invocation.objects.filter(pk=inv.pk).update(created_at=created)  # auto_now_add: set it afterwards
        inv.created_at = created
        for number, failure in enumerate(attempts, start=1):
            started = created + timedelta(seconds=number)
            Attempt.objects.create(
                invocation=inv, tool_spec=inv.tool_spec, number=number, span_id=f"{number:016x}", started_at=started,
                ended_at=None if failure == "running" else started + timedelta(milliseconds=300),
                failure_class="" if failure == "running" else failure,
            )
        return inv

    def pending_confirmation(self, inv: Invocation, *, ago: timedelta) -> Confirmation:
        confirmation = Confirmation.objects.create(
            invocation=inv, tool_spec=inv.tool_spec, tenant=self.tenant, subject=self.subject, run=self.run, digest="d" * 64,
            arguments={}, expires_at=self.now + timedelta(minutes=15),
        )
        Confirmation.objects.filter(pk=confirmation.pk).update(created_at=self.now - ago)
        return confirmation


# In-process executors for ``ServiceWorld`` (ToolSpec.executor = {"kind": "python", ...}).
HERE = __name__


def forecast(arguments, ctx):
    return {"city": arguments["city"], "date": arguments["date"], "sky": "clear"}


def calendar_create(arguments, ctx):
    """Succeeds, except titles starting with reject / lost / flaky (business refusal, no answer, 503)."""
    title = arguments["title"]
    if title.startswith("reject"):
        return ExecutionOutcome(commit=Commit.NOT_COMMITTED, failure_class="business_rejected",
                                error={"code": "business_rejected", "message": "the calendar refused"})
    if title.startswith("lost"):
        return ExecutionOutcome(commit=Commit.UNKNOWN, failure_class="timeout_unknown",
                                error={"code": "outcome_unknown", "message": "no answer"})
    if title.startswith("flaky"):
        return ExecutionOutcome(commit=Commit.NOT_COMMITTED, failure_class="transient",
                                error={"code": "transient", "message": "503"})
    return ExecutionOutcome(commit=Commit.COMMITTED, value={"id": f"evt_{ctx.invocation_id[:8]}"},
                            external_resource_id=f"evt_{ctx.invocation_id[:8]}")


def calendar_lookup(arguments, ctx):
    return LookupOutcome(committed=True, external_resource_id="evt_found", value={"id": "evt_found"})


def _published(name: str) -> ToolSpec | None:
    return ToolSpec.objects.filter(name=name, version=1).first()


class ServiceWorld:
    """Three tools (published once), a subject holding grants, one without any, a run + model call each.

    Everything goes through the services; execution runs in this process with the ``python``
    executors above (``execute`` claims and runs one attempt).
    """

    def __init__(self, *, user):
        self.user = user
        self.weather = _published("weather.get_forecast") or make_toolspec(
            executor={"kind": "python", "callable": f"{HERE}.forecast"},
        )
        self.alerts = _published("weather.get_alerts") or make_toolspec(  # read-only, but a human must confirm it
            name="weather.get_alerts", executor={"kind": "python", "callable": f"{HERE}.forecast"},
            confirmation_policy={"required": True, "expires_seconds": 600},
        )
        self.calendar = _published("calendar.create_event") or make_calendar_spec(
            confirm_seconds=600,
            executor={"kind": "python", "callable": f"{HERE}.calendar_create", "lookup": f"{HERE}.calendar_lookup"},
        )
        self.subject = make_subject()
        make_grant(subject=self.subject)  # weather.read, any city
        make_grant(subject=self.subject, capability="calendar.write", operation_class="create")
        self.stranger = make_subject(tenant=self.subject.tenant)  # holds no grant
        refs = [self.weather.ref, self.alerts.ref, self.calendar.ref]
        self.call = self._call(self.subject, refs)
        self.stranger_call = self._call(self.stranger, refs)
        self._n = 0

    @staticmethod
    def _call(subject, refs):
        run = runs.run_create(subject=subject, budgets={}, timezone_name="Asia/Shanghai", locale="en-US",
                                  metadata={}, trace=None)
        return runs.model_call_create(run=run, tool_refs=refs, fmt="openai", context=[])

    def propose(self, name: str, arguments, *, stranger: bool = False, key: str | None = None, expect_new: bool = True):
        self._n += 1
        raw = arguments if isinstance(arguments, bytes) else (
            arguments.encode() if isinstance(arguments, str) else json.dumps(arguments).encode()
        )
        inv, created = admission.proposal_admit(
            model_call=self.stranger_call if stranger else self.call, subject=self.stranger if stranger else self.subject,
            proposal_id=f"call_{self._n}", name=name, arguments_bytes=raw, idempotency_key=key,
        )
        assert created is expect_new
        return inv

    def write(self, title: str, **kw):
        return self.propose(self.calendar.ref, {"calendar_id": " Primary ", "title": title}, **kw)

    def pending(self, inv) -> Confirmation:
        return Confirmation.objects.get(invocation=inv, state="pending")

    def approve(self, inv):
        confirmation_approve(confirmation=self.pending(inv), user=self.user, digest_seen=inv.digest, reason="ok")
        return fresh(inv)

    def execute(self, inv):
        claimed = execution_claim(invocation_id=inv.pk)
        assert claimed is not None, f"nothing to claim in {fresh(inv).state}"
        execution_run(invocation=claimed[0], attempt=claimed[1])
        return fresh(inv)


class RunWorld:
    """One subject, one run and one model call that sees ``spec`` (an account + amount tool such
    as the ledger.spend of tests/invocations/test_limits_race.py); ``amount``: each call's default;
    ``subject``: another run of an existing subject (a new subject by default)."""

    def __init__(self, *, spec: ToolSpec, amount: int, subject: Subject | None = None):
        self.spec, self.amount = spec, amount
        self.subject = subject or make_subject()
        self.run = runs.run_create(subject=self.subject, budgets={}, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
        self.call = runs.model_call_create(run=self.run, tool_refs=[spec.ref], fmt="openai", context=[])

    def validated(self, n: int, *, amount: int | None = None) -> list[Invocation]:
        """``n`` invocations inserted straight in VALIDATED (an INSERT is not a guarded transition)."""
        arguments = {"account": "acct_1", "amount_minor": self.amount if amount is None else amount}
        out = []
        for _ in range(n):
            proposal = Proposal.objects.create(
                model_call=self.call, proposal_id=f"race_{uuid.uuid4().hex}", name=self.spec.ref,
                arguments_bytes=json.dumps(arguments).encode(), span_id="b" * 16,
            )
            out.append(Invocation.objects.create(
                proposal=proposal, run=self.run, model_call=self.call, tenant=self.subject.tenant, subject=self.subject,
                tool_spec=self.spec, tool_name=self.spec.name, tool_version=self.spec.version, state=State.VALIDATED,
                event_seq=0, normalized_arguments=arguments,
                digest=hashlib.sha256(f"{self.subject.tenant.slug}|{self.spec.ref}|{json.dumps(arguments)}".encode()).hexdigest(),
                idempotency_key=f"{self.run.pk}:{proposal.proposal_id}", trace_id=self.run.trace_id, span_id="c" * 16,
            ))
        return out

    def grant(self, limits: dict, **kw):
        return make_grant(subject=self.subject, capability="ledger.spend", operation_class="create", limits=limits, **kw)

    def snapshot(self, grant):
        return next(s for s in grant_snapshots(tenant=self.subject.tenant, subject=self.subject, capabilities=[grant.capability.name])
                    if s.grant_id == str(grant.pk))
