"""The console (Django admin): invocation records with raw bytes and timeline; ToolSpec lifecycle actions."""
from __future__ import annotations

import base64
import html
import re

import pytest
from django.contrib.auth import get_user_model

from invocations_app.models import Event, Invocation, WebhookEndpoint
from specs_app.models import ToolSpec
from tests.builders import make_tenant, make_toolspec

pytestmark = pytest.mark.django_db

INVOCATIONS = "/invocations_app/invocation/"
TOOLSPECS = "/specs_app/toolspec/"
WEBHOOK_ENDPOINTS = "/invocations_app/webhookendpoint/"
# Invalid UTF-8 (\xff) next to markup that must come out escaped, never as live HTML.
BAD_BYTES = b'{"city": "Par\xffis", "note": "<script>alert(1)</script>"}'
GOOD_ARGS = '{"city": "Paris", "date": "2026-07-20"}'


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """PBKDF2 costs ~0.5 s per hash; these tests check behaviour, not hashing strength."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def superuser(db):
    return get_user_model().objects.create_superuser("root", "root@example.invalid", "pw")


@pytest.fixture
def console(client, superuser):
    client.force_login(superuser)
    return client


@pytest.fixture
def proposals(agent, weather):
    """One PARSE_REJECTED (invalid UTF-8) and one AUTHORIZED invocation, posted through the API."""
    run = agent.run()
    call = agent.model_call(run["id"])
    bad = agent.propose(call["id"], name="weather.get_forecast@1", arguments_b64=base64.b64encode(BAD_BYTES).decode())
    good = agent.propose(call["id"], name="weather.get_forecast@1", arguments=GOOD_ARGS)
    assert (bad.json()["state"], good.json()["state"]) == ("PARSE_REJECTED", "AUTHORIZED")
    return {"bad": Invocation.objects.get(pk=bad.json()["id"]), "good": Invocation.objects.get(pk=good.json()["id"])}


def _text(resp) -> str:
    assert resp.status_code == 200, resp.status_code
    return resp.content.decode()


def _change_page(console, invocation: Invocation) -> str:
    return _text(console.get(f"{INVOCATIONS}{invocation.pk}/change/"))


def _timeline(page: str) -> str:
    match = re.search(r"<table class='toolops-timeline'>.*?</table>", page, re.S)
    assert match, "no event timeline table on the page"
    return match.group(0)


# --------------------------------------------------------------------------- invocation changelist


def test_it_lists_invocations_posted_through_the_api(console, proposals):
    page = _text(console.get(INVOCATIONS))
    assert str(proposals["bad"].pk) in page
    assert str(proposals["good"].pk) in page
    assert "PARSE_REJECTED" in page and "AUTHORIZED" in page


@pytest.mark.parametrize("param", ["state", "state__exact"])
def test_it_filters_the_changelist_by_state(console, proposals, param):
    page = _text(console.get(INVOCATIONS, {param: "PARSE_REJECTED"}))
    assert str(proposals["bad"].pk) in page
    assert str(proposals["good"].pk) not in page


def test_it_filters_the_changelist_by_tool(console, proposals):
    page = _text(console.get(INVOCATIONS, {"tool_name": "weather.get_forecast"}))
    assert str(proposals["good"].pk) in page


def test_it_finds_an_invocation_by_proposal_id(console, proposals):
    proposal_id = proposals["good"].proposal.proposal_id
    page = _text(console.get(INVOCATIONS, {"q": proposal_id}))
    assert str(proposals["good"].pk) in page
    assert str(proposals["bad"].pk) not in page


def test_it_offers_no_add_button_for_invocations(console, proposals):
    assert console.get(f"{INVOCATIONS}add/").status_code == 403


# --------------------------------------------------------------------------- invocation change page


def test_it_shows_invalid_utf8_bytes_escaped_on_the_change_page(console, proposals):
    page = _change_page(console, proposals["bad"])
    assert "Par\\xffis" in page
    assert "<script>alert(1)</script>" not in page
    assert html.escape("<script>alert(1)</script>", quote=False) in page
    assert f"{len(BAD_BYTES)} bytes" in page


def test_it_shows_the_exact_bytes_as_hex(console, proposals):
    page = _change_page(console, proposals["bad"])
    assert BAD_BYTES.hex(" ") in page


def test_it_shows_the_parser_record_and_the_rejection(console, proposals):
    page = _change_page(console, proposals["bad"])
    assert "toolops.strict_json" in page and "max_depth" in page and "max_bytes" in page
    assert "parse_rejected" in page and "invalid_utf8" in page


def test_it_shows_the_validator_and_normalizer_records(console, proposals):
    page = html.unescape(_change_page(console, proposals["good"]))
    assert '"validator": "jsonschema"' in page
    assert '"validator_version"' in page
    assert '"dialect": "https://json-schema.org/draft/2020-12/schema"' in page
    assert '"format_assertion": false' in page
    assert '"timezone": "Asia/Shanghai"' in page
    assert proposals["good"].digest in page


def test_it_shows_the_event_timeline_in_order(console, proposals):
    timeline = html.unescape(_timeline(_change_page(console, proposals["good"])))
    edges = re.findall(r"<td>([^<>\s]+) → ([^<>\s]+)</td>", timeline)
    assert edges == [("∅", "PROPOSED"), ("PROPOSED", "PARSED"), ("PARSED", "VALIDATED"), ("VALIDATED", "AUTHORIZED")]
    assert [int(s) for s in re.findall(r"<tr><td>(\d+)</td>", timeline)] == [1, 2, 3, 4]


def test_it_shows_one_timeline_row_per_event_with_its_span(console, proposals):
    invocation = proposals["bad"]
    timeline = _timeline(_change_page(console, invocation))
    events = list(Event.objects.filter(invocation=invocation).order_by("seq"))
    assert timeline.count("<tr><td>") == len(events) == 2
    for event in events:
        assert f"<code>{event.span_id}</code>" in timeline
        assert f"<td>{event.kind}</td>" in timeline


def test_it_shows_the_invocation_read_only(console, proposals):
    resp = console.post(f"{INVOCATIONS}{proposals['good'].pk}/change/", {"state": "OBSERVED"})
    assert resp.status_code == 403
    proposals["good"].refresh_from_db()
    assert proposals["good"].state == "AUTHORIZED"


# --------------------------------------------------------------------------- ToolSpec admin


def test_it_shows_a_published_spec_read_only(console):
    spec = make_toolspec()
    page = _text(console.get(f"{TOOLSPECS}{spec.pk}/change/"))
    assert 'name="input_schema"' not in page
    assert 'name="description"' not in page
    assert "toolops-json" in page  # the schema rendered as text instead
    assert "additionalProperties" in page


def test_it_ignores_posted_edits_to_a_published_spec(console):
    spec = make_toolspec()
    console.post(f"{TOOLSPECS}{spec.pk}/change/", {"input_schema": '{"type": "object"}', "description": "changed"})
    spec.refresh_from_db()
    assert spec.description == "weather.get_forecast for tests"
    assert spec.input_schema["required"] == ["city", "date"]


def test_it_shows_a_draft_spec_editable(console):
    spec = make_toolspec(publish=False)
    page = _text(console.get(f"{TOOLSPECS}{spec.pk}/change/"))
    assert 'name="input_schema"' in page


def test_it_publishes_a_draft_with_the_admin_action(console):
    spec = make_toolspec(publish=False)
    resp = console.post(TOOLSPECS, {"action": "publish", "_selected_action": [spec.pk]}, follow=True)
    assert resp.status_code == 200
    spec.refresh_from_db()
    assert spec.status == ToolSpec.Status.PUBLISHED
    assert f"Published {spec.ref}." in resp.content.decode()


def test_it_reports_a_refused_publish_in_the_admin_and_keeps_the_draft(console):
    spec = make_toolspec(publish=False, schema={"$schema": "http://json-schema.org/draft-03/schema#", "type": "object"})
    resp = console.post(TOOLSPECS, {"action": "publish", "_selected_action": [spec.pk]}, follow=True)
    assert "not published" in resp.content.decode()
    spec.refresh_from_db()
    assert spec.status == ToolSpec.Status.DRAFT


def test_it_makes_a_new_version_with_the_admin_action(console, superuser):
    spec = make_toolspec()
    resp = console.post(TOOLSPECS, {"action": "new_version", "_selected_action": [spec.pk]}, follow=True)
    assert resp.status_code == 200
    draft = ToolSpec.objects.get(name=spec.name, version=2)
    assert draft.status == ToolSpec.Status.DRAFT
    assert draft.input_schema == spec.input_schema
    assert draft.created_by == superuser
    assert f"Created draft {draft.ref} from {spec.ref}." in resp.content.decode()


def test_it_retires_with_the_admin_action(console):
    spec = make_toolspec()
    console.post(TOOLSPECS, {"action": "retire", "_selected_action": [spec.pk]})
    spec.refresh_from_db()
    assert spec.status == ToolSpec.Status.RETIRED


def test_it_offers_no_delete_for_a_published_spec(console):
    spec = make_toolspec()
    assert console.get(f"{TOOLSPECS}{spec.pk}/delete/").status_code == 403


# --------------------------------------------------------------------------- webhook endpoints


@pytest.mark.parametrize("url", ["ftp://hooks.example.com/toolops", "ftps://hooks.example.com/toolops"])
def test_the_webhook_endpoint_form_refuses_a_url_that_is_not_http(console, url):
    form = {"tenant": make_tenant().pk, "url": url, "events": ["invocation.settled"], "is_active": "on"}
    resp = console.post(WEBHOOK_ENDPOINTS + "add/", form)
    assert resp.status_code == 200 and "Enter an http:// or https:// URL." in resp.content.decode()
    assert not WebhookEndpoint.objects.exists()
    assert console.post(WEBHOOK_ENDPOINTS + "add/", {**form, "url": "https://hooks.example.com/toolops"}).status_code == 302
    assert WebhookEndpoint.objects.get().url == "https://hooks.example.com/toolops"


# --------------------------------------------------------------------------- access


@pytest.mark.parametrize("path", [INVOCATIONS, TOOLSPECS])
def test_it_redirects_a_non_staff_user_to_the_login(client, path):
    user = get_user_model().objects.create_user("someone", "someone@example.invalid", "pw")
    client.force_login(user)
    resp = client.get(path)
    assert resp.status_code == 302
    assert resp.url.startswith("/login/")


def test_it_redirects_an_anonymous_visitor_to_the_login(client):
    resp = client.get(INVOCATIONS)
    assert resp.status_code == 302
    assert resp.url.startswith("/login/")
