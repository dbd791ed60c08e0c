"""`manage.py load_demo`: idempotent demo data — tenant, agent + token, admin, the four demo ToolSpecs."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from specs_app.models import ApiToken, Capability, Grant, Subject, Tenant, ToolSpec
from specs_app.services import token_hash
from tests.builders import Agent

pytestmark = pytest.mark.django_db

TOKEN = "tko_demo-test-token-0123456789"
PASSWORD = "s3cret-Demo-pw"
DEMO_REFS = {
    "weather.get_forecast@1": ("read_only", "weather-get_forecast_v1"),
    "calendar.create_event@1": ("write_idempotent", "calendar-create_event_v1"),
    "payments.transfer@1": ("write_unsafe", "payments-transfer_v1"),
    "web.fetch@1": ("read_only", "web-fetch_v1"),
}


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """PBKDF2 costs ~0.5 s per hash; these tests check behaviour, not hashing strength."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _load(**options) -> str:
    out = io.StringIO()
    call_command("load_demo", stdout=out, **options)
    return out.getvalue()


def _counts() -> dict:
    return {
        "tenants": Tenant.objects.count(),
        "subjects": Subject.objects.count(),
        "toolspecs": ToolSpec.objects.count(),
        "tokens": ApiToken.objects.count(),
        "users": get_user_model().objects.count(),
        "capabilities": Capability.objects.count(),
        "grants": Grant.objects.count(),
    }


def test_it_is_idempotent():
    _load(token=TOKEN, admin_password=PASSWORD)
    first = _counts()
    _load(token=TOKEN, admin_password=PASSWORD)
    assert _counts() == first
    assert {k: first[k] for k in ("tenants", "subjects", "toolspecs", "tokens", "users")} == {
        "tenants": 1, "subjects": 1, "toolspecs": 4, "tokens": 1, "users": 1,
    }


def test_it_issues_no_second_token_when_run_again_without_one():
    _load(token=TOKEN, admin_password=PASSWORD)
    out = _load()
    assert ApiToken.objects.count() == 1
    assert TOKEN not in out


def test_it_creates_the_four_demo_toolspecs_published():
    _load(token=TOKEN, admin_password=PASSWORD)
    specs = {s.ref: s for s in ToolSpec.objects.all()}
    assert set(specs) == set(DEMO_REFS)
    for ref, (side_effect_class, _) in DEMO_REFS.items():
        assert specs[ref].status == ToolSpec.Status.PUBLISHED, ref
        assert specs[ref].published_at is not None, ref
        assert specs[ref].side_effect_class == side_effect_class, ref


def test_it_requires_confirmation_for_the_demo_write_tools():
    _load(token=TOKEN, admin_password=PASSWORD)
    for name in ("calendar.create_event", "payments.transfer"):
        assert ToolSpec.objects.get(name=name).confirmation_policy.get("required") is True, name


def test_it_installs_the_given_token_hashed_for_the_demo_agent():
    out = _load(token=TOKEN, admin_password=PASSWORD)
    token = ApiToken.objects.get()
    assert token.token_hash == token_hash(TOKEN) != TOKEN
    assert (token.subject.tenant.slug, token.subject.name) == ("demo", "demo-agent")
    assert TOKEN in out


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "mcp"])
def test_it_lets_the_token_list_exactly_the_four_tools(fmt):
    _load(token=TOKEN, admin_password=PASSWORD)
    resp = Agent(APIClient(), TOKEN).get("/api/v1/tools", format=fmt)
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["name_map"] == {mf: ref for ref, (_, mf) in DEMO_REFS.items()}
    assert len(body["tools"]) == 4


def test_it_lets_the_token_run_the_quick_start_proposal():
    """The quick start (README, docs/getting-started.md): the demo agent proposes a forecast for tomorrow."""
    _load(token=TOKEN, admin_password=PASSWORD)
    agent = Agent(APIClient(), TOKEN)
    run = agent.run()
    call = agent.model_call(run["id"], format="openai")
    inv = agent.propose(call["id"], name="weather-get_forecast_v1", arguments='{"city":"Paris","date":"tomorrow"}').json()
    assert inv["tool"] == "weather.get_forecast@1"
    assert inv["state"] == "AUTHORIZED", inv["error"]


def test_it_defines_every_capability_the_demo_toolspecs_require():
    _load(token=TOKEN, admin_password=PASSWORD)
    required = {entry["capability"] for spec in ToolSpec.objects.all() for entry in spec.required_capabilities}
    assert required == {"weather.read", "calendar.write", "payments.transfer", "web.read"}
    assert required <= set(Capability.objects.values_list("name", flat=True))


def test_it_lets_the_admin_log_in_with_the_given_password(client):
    _load(token=TOKEN, admin_password=PASSWORD)
    assert client.login(username="admin", password=PASSWORD)
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff


def test_it_changes_the_admin_password_when_run_again_with_another(client):
    _load(token=TOKEN, admin_password=PASSWORD)
    _load(admin_password="another-pw")
    assert not client.login(username="admin", password=PASSWORD)
    assert client.login(username="admin", password="another-pw")


def test_it_keeps_the_admin_password_when_run_again_without_one(client):
    _load(token=TOKEN, admin_password=PASSWORD)
    _load()
    assert client.login(username="admin", password=PASSWORD)


def test_it_replaces_an_older_demo_web_grant_with_the_tightened_url_scope(db, settings):
    """An install loaded before issue 11 holds web.read on domain suffixes (every loopback port);
    load_demo revokes that demo grant, with a GrantChange, and grants the demo pages only."""
    from devtools.demo import load_demo
    from specs_app.models import Capability, Grant, GrantChange, Subject, Tenant

    settings.TOOLOPS_DEMO_SERVICES_URL = "http://127.0.0.1:8765"
    tenant = Tenant.objects.create(slug="demo", name="Demo tenant")
    subject = Subject.objects.create(tenant=tenant, name="demo-agent")
    capability = Capability.objects.create(name="web.read", operation_class="read")
    old = Grant.objects.create(capability=capability, tenant=tenant, subject=subject, scope_kind="domain_suffix",
                               scope_values=["127.0.0.1", "localhost"], reason="demo data (load_demo)")
    load_demo(token="tko_demo_upgrade")
    old.refresh_from_db()
    assert old.revoked_at is not None and GrantChange.objects.filter(grant=old, action="revoked").exists()
    [live] = Grant.objects.filter(capability=capability, subject=subject, revoked_at__isnull=True)
    assert (live.scope_kind, live.scope_values) == ("url_prefix", ["http://127.0.0.1:8765/web/pages/"])
    load_demo(token="tko_demo_upgrade")  # idempotent: nothing more is revoked or granted
    assert Grant.objects.filter(capability=capability, subject=subject).count() == 2
