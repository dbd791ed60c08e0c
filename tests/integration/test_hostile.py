"""Holding the boundary against hostile tools and pages (issue 11), black-box: the API, a real
Celery worker process, the demo services and a hostile HTTP server on loopback, two tenants.

Nothing is mocked. Caps and deadlines in the test ToolSpecs are small so each test stays short.
"""
from __future__ import annotations

import html
import json
import subprocess
import time
from pathlib import Path

import pytest
import requests
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

from invocations_app.confirmations import confirmation_approve
from invocations_app.models import Attempt, Confirmation, Event, Invocation, ResultBody, ToolMessage
from tests.builders import Agent, make_grant, make_staff, make_subject, make_tenant, make_token, make_toolspec
from tests.hostile_server import JSON_ERRORS, HostileServer, disguised_encodings, echo_encodings
from toolops.model_io.secret_forms import encoded_variants

from tests.integration.conftest import wait_for

HOSTILE_SECRET = "hst-Q7vN2xLp9RkT4mZcW8yB"
CAL = {"calendar_id": "primary", "title": "A secret meeting", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 30}
FINAL = ("OBSERVED", "FAILED_BEFORE_COMMIT", "OUTCOME_UNKNOWN", "AUTHORIZATION_REJECTED", "VALIDATION_REJECTED")


@pytest.fixture(scope="module")
def hostile():
    server = HostileServer().start()
    yield server
    server.stop()


@pytest.fixture
def hostile_secrets(settings):
    """A credential the hostile tool sends (so the server can echo it back), set before the worker starts."""
    settings.TOOLOPS_TOOL_SECRETS = {**settings.TOOLOPS_TOOL_SECRETS, "HOSTILE_TOKEN": f"Bearer {HOSTILE_SECRET}"}
    return settings.TOOLOPS_TOOL_SECRETS


@pytest.fixture
def hworker(hostile_secrets, worker):
    return worker


def _hostile_tool(hostile, *, name="hostile.fetch", timeout=3, attempts=2, follow=3, max_response=65536, oversize="truncate"):
    """A read-only fetch tool whose URL comes from the model, scoped to the hostile server by grant."""
    return make_toolspec(
        name=name, side_effect_class="read_only", format_assertion=False, normalizers=[],
        schema={"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "properties": {"url": {"type": "string"}}, "required": ["url"], "additionalProperties": False},
        required_capabilities=[{"capability": "hostile.read", "resource_pointer": "/url"}],
        timeout_policy={"attempt_timeout_seconds": timeout, "deadline_seconds": 30},
        retry_policy={"initial_interval": 0.2, "backoff_coefficient": 1, "maximum_interval": 0.2, "maximum_attempts": attempts},
        result_policy={"max_bytes": 2048, "max_response_bytes": max_response, "oversize": oversize},
        # The echo route puts the credential where the resource id is read from, too.
        executor={"kind": "http", "method": "GET", "url": "{url}", "headers": {"Authorization": "secret:HOSTILE_TOKEN"},
                  "follow_redirects": follow, "resource_id_pointer": "/raw_escaped"},
    )


def _agent_with_grant(hostile, *, scope_values=None) -> Agent:
    subject, token = make_token()
    make_grant(capability="hostile.read", operation_class="read", subject=subject, scope_kind="url_prefix",
               scope_values=scope_values or [f"{hostile.base}/"])
    return Agent(APIClient(), token)


def _call(agent: Agent, tool: str, arguments: dict, *, key: str | None = None) -> dict:
    run = agent.run(timezone="Asia/Shanghai")
    call = agent.model_call(run["id"], tools=[tool])
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else None
    resp = agent.post(f"/api/v1/model-calls/{call['id']}/proposals",
                      {"proposal_id": "call_1", "name": tool, "arguments": json.dumps(arguments, ensure_ascii=False)},
                      headers=headers)
    assert resp.status_code == 201, resp.content
    return resp.json()


def _settled(agent: Agent, invocation_id: str, timeout: float = 40) -> dict:
    def done():
        inv = agent.get(f"/api/v1/invocations/{invocation_id}").json()
        return inv if inv["state"] in FINAL else None

    return wait_for(done, timeout=timeout, interval=0.2)


def _approve(invocation_id: str) -> None:
    approver = User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]
    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    confirmation_approve(confirmation=confirmation, user=approver, digest_seen=confirmation.digest, reason="ok")


def _rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


# --- 1. remote keys per tenant -----------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_it_gives_two_tenants_sharing_a_key_two_independent_events(demo_agent, worker, demo_services):
    other_subject, other_token = make_token(subject=make_subject(tenant=make_tenant(slug="tenant-b")))
    make_grant(capability="calendar.write", operation_class="create", subject=other_subject, scope_kind="exact",
               scope_values=["primary"])
    other = Agent(APIClient(), other_token)
    first = _call(demo_agent, "calendar.create_event@1", CAL, key="shared-key-1")
    second = _call(other, "calendar.create_event@1", {**CAL, "title": "B's own meeting"}, key="shared-key-1")
    _approve(first["id"])
    a = _settled(demo_agent, first["id"])
    _approve(second["id"])
    b = _settled(other, second["id"])
    assert a["state"] == b["state"] == "OBSERVED", (a, b)
    events = {e["id"]: e for e in demo_services.calendar_events("primary")}
    assert len(events) == 2  # two effects, not one replayed to both tenants
    assert events[a["result"]["external_resource_id"]]["title"] == "A secret meeting"
    assert events[b["result"]["external_resource_id"]]["title"] == "B's own meeting"
    sent = [r["idempotency_key"] for r in demo_services.requests_log("calendar") if r["method"] == "POST"]
    recorded = [Attempt.objects.get(invocation_id=i).remote_key for i in (first["id"], second["id"])]
    assert sent == recorded and len(set(sent)) == 2 and "shared-key-1" not in sent
    assert all(k.startswith("tk1-") for k in sent)
    # The call record shows each tenant the key its remote was sent (the API's attempts[]).
    assert [a["attempts"][0]["remote_key"], b["attempts"][0]["remote_key"]] == recorded


# --- 3. bounded attempts: memory, deadline, lease ------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_it_keeps_worker_memory_flat_on_a_300_mb_page(hostile, hworker, capsys):
    _hostile_tool(hostile, max_response=262144)
    agent = _agent_with_grant(hostile)
    warm = _settled(agent, _call(agent, "hostile.fetch@1", {"url": f"{hostile.base}/page/small"})["id"])
    assert warm["state"] == "OBSERVED"
    children = hworker.child_pids()
    before = {pid: _rss_kib(pid, "VmRSS") for pid in children}
    peak_before = {pid: _rss_kib(pid, "VmHWM") for pid in children}
    started = time.monotonic()
    big = _settled(agent, _call(agent, "hostile.fetch@1", {"url": f"{hostile.base}/big?mb=300"})["id"])
    elapsed = time.monotonic() - started
    after = {pid: _rss_kib(pid, "VmRSS") for pid in children}
    peak_after = {pid: _rss_kib(pid, "VmHWM") for pid in children}
    with capsys.disabled():
        print(f"\n[hostile] worker RSS KiB before={before} after={after} peak before={peak_before} "
              f"peak after={peak_after}; 300 MB page settled in {elapsed:.2f}s")
    assert big["state"] == "OBSERVED"
    inv = Invocation.objects.get(pk=big["id"])
    assert inv.result_value["truncated_at_bytes"] == 262144
    assert inv.attempt_count == 1
    assert Attempt.objects.get(invocation=inv).outcome["detail"]["response_truncated"] is True
    assert hostile.big_completed == 0  # the worker stopped reading: the server never finished
    assert all(peak_after[p] - peak_before[p] < 40 * 1024 for p in children), (peak_before, peak_after)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("shape", ["http10", "close", "chunked", "length"])
def test_it_ends_a_trickling_page_at_the_deadline_with_one_live_attempt(hostile, hworker, capsys, shape):
    """However the page is framed. Before, a page that ends with the connection (HTTP/1.0,
    Connection: close) held each attempt for the whole minute: the socket the deadline shut had
    been handed to the response. A read cut at its deadline is read again: the second attempt."""
    _hostile_tool(hostile, timeout=2, attempts=2)
    agent = _agent_with_grant(hostile)
    inv = _call(agent, "hostile.fetch@1", {"url": f"{hostile.base}/trickle?bytes=60&shape={shape}"})
    most_open, samples = 0, 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        most_open = max(most_open, Attempt.objects.filter(invocation_id=inv["id"], ended_at__isnull=True).count())
        samples += 1
        if Invocation.objects.get(pk=inv["id"]).state in FINAL:
            break
        time.sleep(0.1)
    done = _settled(agent, inv["id"])
    attempts = list(Attempt.objects.filter(invocation_id=inv["id"]).order_by("number"))
    durations = [(a.ended_at - a.started_at).total_seconds() for a in attempts]
    with capsys.disabled():
        print(f"\n[hostile] trickle: {len(attempts)} attempts, durations {[round(d, 2) for d in durations]} s, "
              f"at most {most_open} open at once over {samples} samples")
    assert done["state"] == "FAILED_BEFORE_COMMIT" and done["error"]["code"] == "deadline_exceeded"
    assert most_open == 1 and len(attempts) == 2
    assert all(d < 2 + 1.5 for d in durations), durations  # a 60 s trickle cannot hold a 2 s attempt
    assert [(a.failure_class, a.outcome["error"]["code"]) for a in attempts] == [("timeout_unknown", "deadline_exceeded")] * 2
    assert [a.decision["reason"] for a in attempts] == ["timeout_reread", "max_attempts"]


@pytest.fixture
def hostile_opened(hostile, settings):
    """The hostile server's address on the operator's allow-list (a ToolSpec's fixed endpoint may
    reach it), set before the worker starts."""
    settings.TOOLOPS_EGRESS_ALLOW = [*settings.TOOLOPS_EGRESS_ALLOW, f"127.0.0.1:{hostile.port}"]
    return hostile


@pytest.mark.django_db(transaction=True)
def test_it_never_sends_a_trickled_write_again(hostile_opened, worker):
    """A write cut at its deadline was received and may have acted: its attempt is a timeout,
    the call OUTCOME_UNKNOWN for a person, and nothing is sent a second time."""
    hostile = hostile_opened
    make_toolspec(
        name="hostile.post", side_effect_class="write_unsafe", normalizers=[],
        schema={"type": "object", "properties": {"text": {"type": "string"}}, "additionalProperties": False},
        required_capabilities=[{"capability": "hostile.write"}],
        timeout_policy={"attempt_timeout_seconds": 2, "deadline_seconds": 30},
        retry_policy={"initial_interval": 0.2, "backoff_coefficient": 1, "maximum_interval": 0.2, "maximum_attempts": 3},
        executor={"kind": "http", "method": "POST", "url": f"{hostile.base}/trickle?bytes=60&shape=close"},
    )
    subject, token = make_token()
    make_grant(capability="hostile.write", operation_class="create", subject=subject)
    agent = Agent(APIClient(), token)
    sent_before = len(hostile.paths())
    inv = _call(agent, "hostile.post@1", {"text": "once"})
    done = _settled(agent, inv["id"])
    [attempt] = Attempt.objects.filter(invocation_id=inv["id"])
    assert done["state"] == "OUTCOME_UNKNOWN", done
    assert attempt.failure_class == "timeout_unknown" and attempt.decision["reason"] == "unknown_outcome_unsafe"
    assert (attempt.ended_at - attempt.started_at).total_seconds() < 2 + 1.5
    assert len(hostile.paths()) == sent_before + 1


def slow_tool(arguments, ctx):
    """A python executor slower than its own attempt timeout (python tools have no hard deadline)."""
    time.sleep(float(arguments.get("seconds", 9)))
    return {"slept": arguments.get("seconds", 9)}


@pytest.mark.django_db(transaction=True)
def test_it_never_recovers_a_slow_attempt_whose_worker_is_alive(worker):
    """The old rule ("older than timeout + 5 s") would call this attempt abandoned at 6 s and start a
    second one beside it; the lease the live worker renews keeps it the only attempt."""
    make_toolspec(
        name="slow.tool", side_effect_class="read_only", normalizers=[],
        schema={"type": "object", "properties": {"seconds": {"type": "number"}}, "additionalProperties": False},
        required_capabilities=[{"capability": "slow.read"}],
        timeout_policy={"attempt_timeout_seconds": 1, "deadline_seconds": 60},
        executor={"kind": "python", "callable": "tests.integration.test_hostile.slow_tool"},
    )
    subject, token = make_token()
    make_grant(capability="slow.read", subject=subject)
    agent = Agent(APIClient(), token)
    inv = _call(agent, "slow.tool@1", {"seconds": 11})
    done = _settled(agent, inv["id"], timeout=40)
    assert done["state"] == "OBSERVED"
    assert Attempt.objects.filter(invocation_id=inv["id"]).count() == 1
    kinds = [e["kind"] for e in agent.get(f"/api/v1/invocations/{inv['id']}/events").json()]
    assert "attempt_abandoned" not in kinds


# --- 2 and 4. redirects and egress ----------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_it_follows_redirects_only_inside_the_grant_and_the_egress_policy(hostile, hworker, demo_services):
    _hostile_tool(hostile, follow=3)
    agent = _agent_with_grant(hostile)
    demo_port = demo_services.base.rsplit(":", 1)[1]
    escapes = {
        "file:///etc/passwd": "scheme_refused",
        "gopher://127.0.0.1:70/_stats": "scheme_refused",
        f"http://localhost:{hostile.port}/page/small": "egress_out_of_scope",
        f"http://[::ffff:127.0.0.1]:{hostile.port}/page/small": "egress_out_of_scope",
        f"http://0.0.0.0:{hostile.port}/page/small": "egress_out_of_scope",
        f"http://127.0.0.1:{demo_port}/calendar/calendars/primary/events": "egress_out_of_scope",
        "http://169.254.169.254/latest/meta-data/": "egress_out_of_scope",
        f"{hostile.base}/redirect?to=file:///etc/shadow": "scheme_refused",
    }
    results = {}
    for target, code in escapes.items():
        inv = _call(agent, "hostile.fetch@1", {"url": f"{hostile.base}/redirect?to={requests.utils.quote(target, safe='')}"})
        results[target] = (_settled(agent, inv["id"]), code)
    for target, (done, code) in results.items():
        assert done["state"] == "FAILED_BEFORE_COMMIT", (target, done)
        assert done["error"]["code"] == code, (target, done["error"])
        assert Invocation.objects.get(pk=done["id"]).attempt_count == 1  # permanent: never retried
    assert not [r for r in demo_services.requests_log("calendar") if r["method"] == "GET"]
    # Inside the scope, hops are followed up to the ToolSpec's limit and no further.
    ok = _settled(agent, _call(agent, "hostile.fetch@1", {"url": f"{hostile.base}/chain/3"})["id"])
    assert ok["state"] == "OBSERVED"
    too_long = _settled(agent, _call(agent, "hostile.fetch@1", {"url": f"{hostile.base}/chain/5"})["id"])
    assert too_long["state"] == "FAILED_BEFORE_COMMIT" and too_long["error"]["detail"]["http_status"] == 302


@pytest.mark.django_db(transaction=True)
def test_it_refuses_a_loopback_address_that_the_grant_names_only_by_host_name(hostile, hworker):
    _hostile_tool(hostile)
    agent = _agent_with_grant(hostile, scope_values=[f"http://localhost:{hostile.port}/"])
    before = len(hostile.paths())
    done = _settled(agent, _call(agent, "hostile.fetch@1", {"url": f"http://localhost:{hostile.port}/page/small"})["id"])
    assert done["state"] == "FAILED_BEFORE_COMMIT" and done["error"]["code"] == "egress_address_denied"
    assert len(hostile.paths()) == before  # nothing was sent


@pytest.mark.django_db(transaction=True)
def test_it_lets_web_fetch_reach_the_demo_pages_and_nothing_else(demo_agent, worker, demo_services):
    page = _settled(demo_agent, _call(demo_agent, "web.fetch@1", {"url": f"{demo_services.base}/web/pages/small"})["id"])
    assert page["state"] == "OBSERVED"
    for path in ("/_control/requests", "/calendar/calendars/primary/events", "/payments/transfers",
                 "/web/pages/../../_control/requests", "/web/pages/%2e%2e/%2e%2e/payments/transfers"):
        inv = _call(demo_agent, "web.fetch@1", {"url": demo_services.base + path})
        assert inv["state"] == "AUTHORIZATION_REJECTED", (path, inv["state"])
    for url in ("http://127.0.0.1:8000/api/schema/", "http://localhost:8000/console/", "file:///etc/passwd"):
        inv = _call(demo_agent, "web.fetch@1", {"url": url})
        assert inv["state"] in ("AUTHORIZATION_REJECTED", "VALIDATION_REJECTED"), (url, inv["state"])


# --- 5. encoded secrets --------------------------------------------------------------------------

def _all_forms() -> dict[str, str]:
    forms = {}
    for secret in (HOSTILE_SECRET, f"Bearer {HOSTILE_SECRET}"):
        forms.update({f"{secret[:6]}:{k}": v for k, v in encoded_variants(secret).items()})
        forms.update({f"{secret[:6]}:echo:{k}": v for k, v in echo_encodings(secret).items() if len(v) >= 12})
    return forms


@pytest.mark.django_db(transaction=True)
def test_it_redacts_an_echoed_secret_in_every_encoding_everywhere(hostile, hworker, settings, capsys):
    _hostile_tool(hostile, attempts=1)
    agent = _agent_with_grant(hostile)
    ids = [_call(agent, "hostile.fetch@1", {"url": f"{hostile.base}{p}"})["id"] for p in ("/echo", "/echo-text", "/echo-error")]
    done = [_settled(agent, i) for i in ids]
    assert [d["state"] for d in done] == ["OBSERVED", "OBSERVED", "FAILED_BEFORE_COMMIT"], done
    assert "[REDACTED]" in Invocation.objects.get(pk=ids[0]).external_resource_id
    # The secret did go out (the server saw it) and came back in 14 encodings.
    assert any(e["headers"].get("Authorization") == f"Bearer {HOSTILE_SECRET}" for e in hostile.log)
    messages = b"".join(
        agent.get(f"/api/v1/invocations/{i}/tool-message", format=fmt).content for i in ids for fmt in ("openai", "mcp"))
    assert b"REDACTED" in messages
    db = connection.settings_dict
    dump = subprocess.run(
        ["/usr/lib/postgresql/15/bin/pg_dump", "-h", db["HOST"] or "127.0.0.1", "-p", str(db["PORT"] or 5432),
         "-U", db["USER"] or "postgres", "--data-only", db["NAME"]],
        capture_output=True, check=True,
    ).stdout.decode("utf-8", "replace")
    log = hworker.output()
    forms = _all_forms()
    hits = {name: (dump.lower().count(v.lower()) if v.lower() == v.upper() or "%" in v or "\\u" in v else dump.count(v),
                   log.count(v)) for name, v in forms.items()}
    with capsys.disabled():
        print(f"\n[hostile] grep {len(forms)} encodings of 2 secret values: pg_dump {len(dump)} bytes, "
              f"worker log {len(log)} bytes, hits={sum(d + w for d, w in hits.values())}")
    assert {k: v for k, v in hits.items() if v != (0, 0)} == {}
    assert HOSTILE_SECRET.encode() not in messages


def _texts(value) -> list[str]:
    """Every string in a stored or served value, escapes undone: JSON bytes and JSON held in a
    string (a tool message's content) are parsed, object keys included."""
    if isinstance(value, (bytes, memoryview)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        return [value, *_texts(parsed)] if isinstance(parsed, (dict, list)) else [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in [k, *_texts(v)]]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def _rows_of(ids: list[str]) -> list[str]:
    """Every string in every database row of these calls."""
    rows = [*Invocation.objects.filter(pk__in=ids).values(), *Attempt.objects.filter(invocation_id__in=ids).values(),
            *Event.objects.filter(invocation_id__in=ids).values(), *ToolMessage.objects.filter(invocation_id__in=ids).values(),
            *ResultBody.objects.filter(invocation_id__in=ids).values()]
    return [t for row in rows for value in row.values() for t in _texts(value)]


@pytest.mark.django_db(transaction=True)
def test_it_redacts_a_disguised_or_split_secret_everywhere(hostile, hworker, client):
    """Issue 29 item 6, through the worker: the hostile tool echoes its credential in base32,
    nested base64/hex/percent, HTML entities, spread over spaces and zero-width characters, in
    fullwidth, and split across adjacent fields — in a result and in an error. None of it reaches
    the agent's tool messages, the call record in the console, the database rows or the log."""
    _hostile_tool(hostile, attempts=1)
    agent = _agent_with_grant(hostile)
    ids = [_call(agent, "hostile.fetch@1", {"url": f"{hostile.base}{p}"})["id"] for p in ("/echo-disguised", "/echo-disguised-error")]
    done = [_settled(agent, i) for i in ids]
    assert [d["state"] for d in done] == ["OBSERVED", "FAILED_BEFORE_COMMIT"], done
    seen = f"Bearer {HOSTILE_SECRET}"
    assert any(e["headers"].get("Authorization") == seen for e in hostile.log)  # the credential did go out
    served = [agent.get(f"/api/v1/invocations/{i}{tail}", **({"format": fmt} if fmt else {})).content
              for i in ids for tail, fmt in (("/tool-message", "openai"), ("/tool-message", "anthropic"),
                                             ("/tool-message", "mcp"), ("", None), ("/events", None))]
    client.force_login(make_staff(username="auditor", superuser=True))
    pages = [client.get(f"/console/calls/{i}/") for i in ids]
    assert [p.status_code for p in pages] == [200, 200]
    places = {
        "agent API": "\n".join(t for body in served for t in _texts(body)),
        "call record": "\n".join(html.unescape(p.content.decode()) for p in pages),
        "database rows": "\n".join(_rows_of(ids)),
        "worker log": hworker.output(),
    }
    half = len(seen) // 2
    forms = {**disguised_encodings(seen), "first half": seen[:half], "second half": seen[half:]}
    window = 16  # what is left of an encoding is its edges, never a run this long
    leaks = sorted((place, name) for place, text in places.items() for name, form in forms.items()
                   if any(form[i:i + window] in text for i in range(max(1, len(form) - window + 1))))
    assert leaks == [], leaks
    content = json.loads(json.loads(served[0])["content"])
    found = content["result"]["preview"] if content["truncated"] else content["result"]
    assert content["redactions"] >= len(forms) and "[REDACTED]" in str(found)


# --- 6. outcome mapping that cannot be crashed -----------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_it_classifies_any_status_and_error_body_without_crashing(hostile, hworker):
    _hostile_tool(hostile, attempts=2)
    agent = _agent_with_grant(hostile)
    urls = [f"{hostile.base}/json-error?kind={k}" for k in JSON_ERRORS]
    urls += [f"{hostile.base}/json-error?kind=list&status=422", f"{hostile.base}/status?code=999",
             f"{hostile.base}/status?code=302", f"{hostile.base}/status?code=600"]
    ids = {url: _call(agent, "hostile.fetch@1", {"url": url})["id"] for url in urls}
    for url, inv_id in ids.items():
        done = _settled(agent, inv_id)
        assert done["state"] == "FAILED_BEFORE_COMMIT", (url, done)
        assert done["error"]["code"] != "executor_error", (url, done["error"])
        attempts = Attempt.objects.filter(invocation_id=inv_id)
        assert all(a.failure_class in ("transient", "permanent", "business_rejected") for a in attempts), url
        expected = 2 if "status=" not in url and "code=" not in url else 1  # 5xx retried within policy, others not
        assert attempts.count() == expected, (url, [a.failure_class for a in attempts])


# --- 8. payments reconcile by client reference --------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_it_reconciles_an_unknown_payment_by_its_client_reference(demo_agent, worker, demo_services):
    demo_services.fault("payments", fault="commit_then_drop")
    inv = _call(demo_agent, "payments.transfer@1", {"to_account": "acct-42", "amount": {"amount": "12.50", "currency": "USD"}})
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"], timeout=40)
    if done["state"] == "OUTCOME_UNKNOWN":  # the reconciliation task runs every 5 s
        done = wait_for(lambda: (d := demo_agent.get(f"/api/v1/invocations/{inv['id']}").json())["state"] == "OBSERVED" and d,
                        timeout=30)
    transfers = demo_services.transfers("acct-42")
    assert len(transfers) == 1  # looked up, never re-sent
    attempt = Attempt.objects.get(invocation_id=inv["id"])
    assert transfers[0]["client_reference"] == attempt.remote_key != Invocation.objects.get(pk=inv["id"]).idempotency_key
    assert done["result"]["commit_status"] == "committed"
    assert done["result"]["external_resource_id"] == transfers[0]["id"]
    kinds = [e["kind"] for e in demo_agent.get(f"/api/v1/invocations/{inv['id']}/events").json()]
    assert "outcome_unknown" in kinds and "reconciliation_lookup" in kinds
