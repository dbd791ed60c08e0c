"""The OAuth 2.1 authorization server (oauth/, issue 33) through Django's test client: metadata,
registration (RFC 7591 and Client ID Metadata Documents), consent, PKCE S256 only, code replay,
refresh rotation with reuse detection, revocation, resource binding, tenant isolation."""
from __future__ import annotations

import base64
import hashlib
import json
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm
from oauth2_provider.cimd import CIMDError
from oauth2_provider.models import get_application_model

from oauth.models import AgentConsent
from oauth.registration import EgressMetadataFetcher
from oauth.tokens import oauth_token_verify, remembered
from tests.builders import logged_in_client, make_staff, make_subject, make_tenant
from worker.executors import http_client

pytestmark = pytest.mark.django_db

MCP = "http://127.0.0.1:8001/mcp"
LOOPBACK = "http://127.0.0.1/callback"


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.TOOLOPS_MCP_URL = MCP
    settings.TOOLOPS_OAUTH_RESOURCES = [MCP]
    settings.TOOLOPS_OAUTH_REGISTER_RATE = "off"
    remembered.clear()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def register(client: Client, redirect_uris: list[str], **extra) -> Client:
    body = {"client_name": "Desk client", "redirect_uris": redirect_uris, "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none", **extra}
    return client.post("/oauth/register/", json.dumps(body), content_type="application/json")


class World:
    def __init__(self):
        self.acme, self.globex = make_tenant(slug="acme"), make_tenant(slug="globex")
        self.planner = make_subject(tenant=self.acme, name="planner")
        self.rival = make_subject(tenant=self.globex, name="rival")
        self.alice = make_staff(username="alice")
        assign_perm("specs_app.connect_agents", self.alice, self.acme)
        self.browser = logged_in_client(self.alice)
        answer = register(Client(), [LOOPBACK])
        assert answer.status_code == 201, answer.content
        self.client_id = answer.json()["client_id"]

    def authorize_params(self, *, redirect_uri=LOOPBACK, method="S256", challenge=None, resource=MCP, client_id=None) -> dict:
        params = {"response_type": "code", "client_id": client_id or self.client_id, "redirect_uri": redirect_uri,
                  "state": "st-1", "scope": "mcp"}
        if challenge is not None:
            params["code_challenge"] = challenge
        if method is not None:
            params["code_challenge_method"] = method
        if resource is not None:
            params["resource"] = resource
        return params

    def consent(self, *, subject=None, verifier_challenge=None, redirect_uri=LOOPBACK, **params):
        """GET the consent page, then allow with ``subject``: (the redirect's query, the page)."""
        verifier, challenge = verifier_challenge or pkce()
        query = self.authorize_params(redirect_uri=redirect_uri, challenge=challenge, **params)
        page = self.browser.get("/oauth/authorize/?" + urlencode(query))
        assert page.status_code == 200, page.content
        form = {k: v for k, v in query.items()}
        form.update({"allow": "Authorize", "subject": str((subject or self.planner).pk)})
        answer = self.browser.post("/oauth/authorize/?" + urlencode(query), form)
        return answer, page, verifier

    def code(self, **kw) -> tuple[str, str]:
        answer, _, verifier = self.consent(**kw)
        assert answer.status_code == 302, answer.content
        return parse_qs(urlsplit(answer["Location"]).query)["code"][0], verifier

    def token(self, **form):
        return Client().post("/oauth/token/", {"client_id": self.client_id, **form})

    def exchange(self, code: str, verifier: str | None, *, redirect_uri=LOOPBACK):
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri}
        if verifier is not None:
            form["code_verifier"] = verifier
        return self.token(**form)


@pytest.fixture
def world():
    return World()


# --- discovery ---------------------------------------------------------------------------------

def test_metadata_is_served_at_both_discovery_paths_and_offers_only_what_is_accepted():
    for path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
        document = Client().get(path).json()
        assert document["issuer"] == "http://testserver"
        assert document["authorization_endpoint"] == "http://testserver/oauth/authorize/"
        assert document["token_endpoint"] == "http://testserver/oauth/token/"
        assert document["revocation_endpoint"] == "http://testserver/oauth/revoke/"
        assert document["registration_endpoint"] == "http://testserver/oauth/register/"
        assert document["code_challenge_methods_supported"] == ["S256"]
        assert document["response_types_supported"] == ["code"]
        assert document["grant_types_supported"] == ["authorization_code", "refresh_token"]
        assert document["client_id_metadata_document_supported"] is True
        assert document["authorization_response_iss_parameter_supported"] is True


# --- registration ------------------------------------------------------------------------------

def test_registration_takes_loopback_and_https_redirects_and_refuses_others():
    assert register(Client(), ["http://127.0.0.1/cb", "http://localhost:3000/cb", "https://app.example/cb"]).status_code == 201
    for bad in ("http://app.example/cb", "https://app.example/cb#x", "myapp:/cb", "https://user@app.example/cb"):
        answer = register(Client(), [bad])
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_redirect_uri", bad


def test_registration_is_rate_limited_per_address(settings):
    settings.TOOLOPS_OAUTH_REGISTER_RATE = "2/hour"
    client = Client(REMOTE_ADDR=f"198.51.100.{secrets.randbelow(250) + 1}")
    assert [register(client, [LOOPBACK]).status_code for _ in range(3)] == [201, 201, 429]


def test_loopback_redirects_match_any_port_and_https_ones_exactly(world):
    app = get_application_model().objects.get(client_id=world.client_id)
    app.redirect_uris = f"{LOOPBACK} https://app.example/cb"
    app.save()
    assert world.consent(redirect_uri="http://127.0.0.1:53124/callback")[0].status_code == 302
    assert world.consent(redirect_uri="https://app.example/cb")[0].status_code == 302
    page = world.browser.get("/oauth/authorize/?" + urlencode(world.authorize_params(
        redirect_uri="https://app.example/cb2", challenge=pkce()[1])))
    assert page.status_code == 400 and b"code=" not in page.content


# --- consent and PKCE --------------------------------------------------------------------------

def test_an_anonymous_person_is_sent_to_the_console_login(world):
    answer = Client().get("/oauth/authorize/?" + urlencode(world.authorize_params(challenge=pkce()[1])))
    assert answer.status_code == 302 and answer["Location"].startswith("/login/?next=")


def test_the_consent_page_names_the_client_and_offers_only_agents_the_person_may_hand_out(world):
    _, page, _ = world.consent()
    text = page.content.decode()
    assert "Desk client" in text and world.client_id in text
    assert "planner" in text and "rival" not in text
    # Its form may be followed to the client's registered redirect origin, and nowhere else.
    form_action = next(d for d in page["Content-Security-Policy"].split(";") if d.strip().startswith("form-action"))
    assert form_action.split()[1:] == ["'self'", "http://127.0.0.1"]


def test_the_code_becomes_short_lived_tokens_bound_to_the_subject_and_the_mcp_resource(world):
    answer, _, verifier = world.consent()
    query = parse_qs(urlsplit(answer["Location"]).query)
    assert query["state"] == ["st-1"] and query["iss"] == ["http://testserver"]  # RFC 9207
    tokens = world.exchange(query["code"][0], verifier).json()
    assert tokens["access_token"].startswith("tkoa_") and tokens["refresh_token"].startswith("tkor_")
    assert tokens["expires_in"] == 900
    principal = oauth_token_verify(secret=tokens["access_token"])
    assert principal.subject == world.planner and principal.resources == (MCP,)
    assert principal.client_id == world.client_id and principal.client_name == "Desk client"
    consent = AgentConsent.objects.get()
    assert consent.user == world.alice and consent.subject == world.planner and consent.resource == MCP


@pytest.mark.parametrize("method", ["plain", None])
def test_pkce_other_than_s256_is_refused_before_consent(world, method):
    page = world.browser.get("/oauth/authorize/?" + urlencode(world.authorize_params(method=method, challenge=pkce()[1])))
    assert page.status_code == 302
    query = parse_qs(urlsplit(page["Location"]).query)
    assert query["error"] == ["invalid_request"] and "code" not in query


def test_a_missing_code_challenge_is_refused(world):
    page = world.browser.get("/oauth/authorize/?" + urlencode(world.authorize_params(challenge=None)))
    assert page.status_code == 302 and "error=" in page["Location"] and "code=" not in page["Location"]


def test_a_missing_or_wrong_code_verifier_is_refused(world):
    code, verifier = world.code()
    assert world.exchange(code, None).json()["error"] == "invalid_request"
    assert world.exchange(code, verifier + "x").json()["error"] == "invalid_grant"


def test_a_resource_other_than_the_mcp_server_is_refused(world):
    page = world.browser.get("/oauth/authorize/?" + urlencode(world.authorize_params(
        challenge=pkce()[1], resource="https://elsewhere.example/mcp")))
    assert page.status_code == 302 and parse_qs(urlsplit(page["Location"]).query)["error"] == ["invalid_target"]


def test_no_resource_sent_binds_the_token_to_the_mcp_server(world):
    code, verifier = world.code(resource=None)
    principal = oauth_token_verify(secret=world.exchange(code, verifier).json()["access_token"])
    assert principal.resources == (MCP,)


def test_a_consent_for_tenant_a_never_yields_a_token_acting_in_tenant_b(world):
    answer, _, _ = world.consent(subject=world.rival)  # a tampered form: another tenant's agent
    assert answer.status_code == 200 and "code=" not in answer.get("Location", "")
    assert not AgentConsent.objects.exists()
    # Granted on B too, the token still acts as the chosen agent of A: its tenant is the subject's.
    code, verifier = world.code()
    principal = oauth_token_verify(secret=world.exchange(code, verifier).json()["access_token"])
    assert principal.subject.tenant == world.acme


def test_denying_issues_no_code(world):
    verifier, challenge = pkce()
    query = world.authorize_params(challenge=challenge)
    answer = world.browser.post("/oauth/authorize/?" + urlencode(query), {**query, "subject": str(world.planner.pk)})
    assert parse_qs(urlsplit(answer["Location"]).query)["error"] == ["access_denied"]
    assert not AgentConsent.objects.exists()


# --- replay, rotation, revocation --------------------------------------------------------------

def test_a_replayed_code_is_refused_and_revokes_what_it_issued(world):
    code, verifier = world.code()
    first = world.exchange(code, verifier).json()
    assert oauth_token_verify(secret=first["access_token"]) is not None
    remembered.clear()
    replay = world.exchange(code, verifier)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert oauth_token_verify(secret=first["access_token"]) is None
    assert world.token(grant_type="refresh_token", refresh_token=first["refresh_token"]).json()["error"] == "invalid_grant"


def test_refresh_tokens_rotate_and_a_reused_one_revokes_its_family(world):
    code, verifier = world.code()
    first = world.exchange(code, verifier).json()
    second = world.token(grant_type="refresh_token", refresh_token=first["refresh_token"]).json()
    assert second["refresh_token"] != first["refresh_token"]
    principal = oauth_token_verify(secret=second["access_token"])
    assert principal.subject == world.planner and principal.resources == (MCP,)
    remembered.clear()
    reuse = world.token(grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert reuse.json()["error"] == "invalid_grant"
    assert oauth_token_verify(secret=second["access_token"]) is None
    assert world.token(grant_type="refresh_token", refresh_token=second["refresh_token"]).json()["error"] == "invalid_grant"


def test_revocation_rfc7009_ends_the_token(world):
    code, verifier = world.code()
    tokens = world.exchange(code, verifier).json()
    answer = Client().post("/oauth/revoke/", {"client_id": world.client_id, "token": tokens["access_token"]})
    assert answer.status_code == 200
    remembered.clear()
    assert oauth_token_verify(secret=tokens["access_token"]) is None


# --- Client ID Metadata Documents -------------------------------------------------------------

CIMD_URL = "https://client.example/oauth/client.json"


def test_a_client_id_metadata_document_registers_the_client(world, monkeypatch):
    document = {"client_id": CIMD_URL, "client_name": "Metadata client", "redirect_uris": [LOOPBACK],
                "grant_types": ["authorization_code", "refresh_token"], "token_endpoint_auth_method": "none"}
    fetched = []

    def send(request, policy):  # the network, and only it, is stood in for
        fetched.append((request.url, policy.max_response_bytes))
        return http_client.HttpResponse(200, "OK", {"content-type": "application/json", "cache-control": "max-age=600"},
                                        json.dumps(document).encode(), False)

    monkeypatch.setattr(http_client, "send", send)
    verifier, challenge = pkce()
    page = world.browser.get("/oauth/authorize/?" + urlencode(world.authorize_params(challenge=challenge, client_id=CIMD_URL)))
    assert page.status_code == 200 and "Metadata client" in page.content.decode()
    assert fetched == [(CIMD_URL, 16 * 1024)]
    application = get_application_model().objects.get(client_id=CIMD_URL)
    assert application.registration_source == "cimd" and application.name == "Metadata client"
    kept = (application.cimd_expires_at - timezone.now()).total_seconds()
    assert 590 < kept <= 600  # the document's own max-age


def test_a_metadata_document_with_a_foreign_redirect_is_refused(world, monkeypatch):
    document = {"client_id": CIMD_URL, "client_name": "x", "redirect_uris": ["http://evil.example/cb"]}
    monkeypatch.setattr(http_client, "send", lambda request, policy: http_client.HttpResponse(
        200, "OK", {"content-type": "application/json"}, json.dumps(document).encode(), False))
    with pytest.raises(CIMDError):
        EgressMetadataFetcher().fetch(CIMD_URL)


@pytest.mark.parametrize("url", ["https://127.0.0.1/client.json", "https://169.254.169.254/latest/meta-data",
                                 "https://[::1]/client.json", "http://client.example/client.json", "https://client.example/"])
def test_the_metadata_fetcher_refuses_private_addresses_and_non_https_urls(url):
    with pytest.raises(CIMDError):
        EgressMetadataFetcher().fetch(url)


# --- the console -------------------------------------------------------------------------------

def test_registered_clients_are_listed_and_removable_in_the_console_with_their_consents(world):
    code, verifier = world.code()
    tokens = world.exchange(code, verifier).json()
    admin = logged_in_client(make_staff(username="root", superuser=True))
    app = get_application_model().objects.get(client_id=world.client_id)
    listing = admin.get("/oauth2_provider/application/").content.decode()
    assert "Desk client" in listing
    consents = admin.get("/oauth/agentconsent/").content.decode()
    assert "planner" in consents and "alice" in consents
    answer = admin.post("/oauth2_provider/application/", {"action": "remove", "_selected_action": [app.pk]})
    assert answer.status_code == 302
    assert not get_application_model().objects.filter(pk=app.pk).exists() and not AgentConsent.objects.exists()
    remembered.clear()
    assert oauth_token_verify(secret=tokens["access_token"]) is None


def test_revoking_a_consent_in_the_console_ends_its_tokens_at_once(world):
    code, verifier = world.code()
    tokens = world.exchange(code, verifier).json()
    assert oauth_token_verify(secret=tokens["access_token"]) is not None  # now remembered
    admin = logged_in_client(make_staff(username="root", superuser=True))
    consent = AgentConsent.objects.get()
    answer = admin.post("/oauth/agentconsent/", {"action": "revoke", "_selected_action": [consent.pk]})
    assert answer.status_code == 302
    assert oauth_token_verify(secret=tokens["access_token"]) is None
    assert world.token(grant_type="refresh_token", refresh_token=tokens["refresh_token"]).json()["error"] == "invalid_grant"
