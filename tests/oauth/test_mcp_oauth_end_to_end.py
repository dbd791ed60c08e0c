"""From no credentials to a recorded tools/call, as an MCP client connects by signing in: the
official SDK's ``OAuthClientProvider`` against the real MCP process and the live console, the
person's login and consent driven in Chromium (issue 33). Nothing is mocked but the client's
own loopback callback, which the browser's route hands back to the SDK."""
from __future__ import annotations

import queue
import secrets
import threading
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from guardian.shortcuts import assign_perm
from oauth2_provider.models import get_application_model

from devtools.oauth_tokens import issue_consented_token
from invocations_app.models import Invocation
from oauth.models import AgentConsent
from specs_app.models import Subject
from tests.browser.conftest import browser, login, page  # noqa: F401 - fixtures used here
from tests.builders import PASSWORD, make_staff
from tests.integration.conftest import demo_agent, demo_services, module_worker, worker_env  # noqa: F401 - fixtures used here
from tests.mcp_server.conftest import McpServer, modern_request

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.browser]

WEATHER = "weather-get_forecast_v1"
CALLBACK = "http://127.0.0.1:33418/callback"


@pytest.fixture
def oauth_mcp_server(worker_env, tmp_path, transactional_db, live_server, settings):
    """The MCP server naming the live console as its authorization server; the console issues
    tokens for that server's URL (and one other resource, to mint a token the server must refuse)."""
    server = McpServer(worker_env, tmp_path / "mcp.log", TOOLOPS_CONSOLE_URL=live_server.url)
    settings.TOOLOPS_OAUTH_RESOURCES = [server.url, "http://127.0.0.1:9/other-mcp"]
    server.start()
    yield server
    server.stop()
    print("---- MCP server log ----\n" + server.output()[-6000:])


class MemoryStorage:
    """The SDK's ``TokenStorage``: what a desktop client would keep on disk."""

    def __init__(self):
        self.tokens = self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


def _run_client(server_url: str, storage: MemoryStorage, authorize_urls: queue.Queue, callbacks: queue.Queue) -> dict:
    """In a thread of its own (the browser drives the test thread): connect with OAuth, list, call."""
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    async def redirect_handler(url: str) -> None:
        authorize_urls.put(url)

    async def callback_handler() -> AuthorizationCodeResult:
        url = await anyio.to_thread.run_sync(lambda: callbacks.get(timeout=60))
        query = parse_qs(urlsplit(url).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query["state"][0], iss=query.get("iss", [None])[0])

    async def main() -> dict:
        auth = OAuthClientProvider(
            server_url=server_url, storage=storage, redirect_handler=redirect_handler, callback_handler=callback_handler,
            client_metadata=OAuthClientMetadata(client_name="SDK desktop client", redirect_uris=[CALLBACK],
                                                grant_types=["authorization_code", "refresh_token"],
                                                token_endpoint_auth_method="none"),
        )
        http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(60.0))
        async with Client(streamable_http_client(server_url, http_client=http)) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool(WEATHER, {"city": "Paris", "date": "tomorrow"})
        return {"names": names, "result": result}

    out: dict = {}

    def run():
        try:
            out.update(anyio.run(main))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            out["error"] = exc
        finally:
            authorize_urls.put(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    out["thread"] = thread
    return out


def test_an_sdk_client_signs_in_chooses_an_agent_and_its_call_is_recorded_under_it(
        oauth_mcp_server, demo_agent, page, live_server):
    agent = demo_agent.subject
    Subject.objects.filter(pk=agent.pk).update(timezone="Asia/Shanghai", locale="zh-CN")  # an admin's setting
    person = make_staff(username="dana")
    assign_perm("specs_app.connect_agents", person, agent.tenant)
    storage, authorize_urls, callbacks = MemoryStorage(), queue.Queue(), queue.Queue()
    seen: list[str] = []
    page.route("http://127.0.0.1:33418/**", lambda route: (seen.append(route.request.url), callbacks.put(route.request.url),
                                                           route.fulfill(status=200, body="You can close this window.")))

    out = _run_client(oauth_mcp_server.url, storage, authorize_urls, callbacks)
    authorize_url = authorize_urls.get(timeout=60)
    assert authorize_url is not None, out.get("error")
    assert authorize_url.startswith(live_server.url + "/oauth/authorize/?")
    page.goto(authorize_url)  # not signed in: the console's login first
    page.fill("#id_username", person.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.get_by_test_id("consent-client").wait_for()
    assert "SDK desktop client" in page.get_by_test_id("consent-client").inner_text()
    page.select_option("select[name=subject]", str(agent.pk))
    page.get_by_test_id("consent-allow").click()
    page.wait_for_url(CALLBACK + "?**")  # the browser lands on the client's loopback callback (routed)
    out["thread"].join(90)
    assert "error" not in out, out.get("error")
    assert parse_qs(urlsplit(seen[0]).query)["iss"] == [live_server.url]  # RFC 9207, checked by the SDK

    # tools/list answered with the agent's tools; the call ran as the agent, through this client.
    assert WEATHER in out["names"] and "toolops_invocation_status" in out["names"]
    result = out["result"]
    assert result.is_error is False, result
    invocation = Invocation.objects.select_related("run", "proposal").get(pk=result.structured_content["invocation_id"])
    assert invocation.state == "OBSERVED" and invocation.subject_id == agent.pk
    application = get_application_model().objects.get(name="SDK desktop client")
    assert invocation.proposal.origin["oauth_client"] == {"client_id": application.client_id, "name": "SDK desktop client"}
    consent = AgentConsent.objects.get()
    assert consent.user == person and consent.subject_id == agent.pk and consent.resource == oauth_mcp_server.url
    # The run MCP opened is in the agent's zone: "tomorrow" is tomorrow in Shanghai.
    assert (invocation.run.timezone, invocation.run.locale) == ("Asia/Shanghai", "zh-CN")
    assert storage.tokens.access_token.startswith("tkoa_") and storage.tokens.expires_in <= 900


def _mcp_status(server: McpServer, token: str | None) -> httpx2.Response:
    request = modern_request("tools/list", token=token or "")
    if token is None:
        request["headers"].pop("Authorization")
    return httpx2.post(server.url, timeout=10, **request)


def _mint(*, subject, resource: str, expires_in: int = 900) -> str:
    return issue_consented_token(subject=subject, user=make_staff(username=f"p-{secrets.token_hex(3)}"),
                                 resource=resource, expires_in=expires_in)


def test_missing_expired_and_other_resource_tokens_get_the_challenge_that_starts_the_flow(oauth_mcp_server, demo_agent):
    agent = demo_agent.subject
    good = _mint(subject=agent, resource=oauth_mcp_server.url)
    assert _mcp_status(oauth_mcp_server, good).status_code == 200
    metadata = f'resource_metadata="{oauth_mcp_server.metadata_url}"'
    for token in (None, _mint(subject=agent, resource="http://127.0.0.1:9/other-mcp"),
                  _mint(subject=agent, resource=oauth_mcp_server.url, expires_in=-5), "tkoa_unknown"):
        answer = _mcp_status(oauth_mcp_server, token)
        assert answer.status_code == 401, token
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith("Bearer ") and metadata in challenge and 'error="invalid_token"' in challenge
    document = httpx2.get(oauth_mcp_server.metadata_url, timeout=10).json()
    # … and the RFC 9728 document names the console, where the flow starts.
    assert [url.rstrip("/") for url in document["authorization_servers"]] == [oauth_mcp_server.env["TOOLOPS_CONSOLE_URL"]]
    # The API tokens people already use keep working unchanged.
    assert _mcp_status(oauth_mcp_server, "tko_integration_token").status_code == 200
