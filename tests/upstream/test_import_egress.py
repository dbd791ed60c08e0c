"""Import and refresh of an upstream MCP server obey the MCP executor's egress policy (issue 16).

The demo notes server listens on loopback: refused unless the operator's allow-list names its
address — by ``upstream_import``, ``manage.py mcp_import`` and the beat's refresh alike. A refused
refresh is recorded (``check_error``, the dashboard's "Upstream unreachable" card) and the tool's
watch state is left alone. "Nothing reached the upstream" is read from its own request log.
"""
from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from control.dashboard import _upstream_cards
from devtools.management.commands.run_console import demo_egress_allow
from specs_app.models import UpstreamTool
from worker.upstream_sync import UpstreamUnavailable, upstream_import, upstream_refresh
from worker.egress_net import operator_openers

from tests.upstream.conftest import SECRET_REF

pytestmark = pytest.mark.django_db


def _closed(settings, notes) -> None:
    settings.TOOLOPS_EGRESS_ALLOW = [e for e in settings.TOOLOPS_EGRESS_ALLOW if e != notes.address]


def test_import_of_a_loopback_upstream_not_allow_listed_is_refused_and_sends_nothing(notes, settings):
    _closed(settings, notes)
    with pytest.raises(UpstreamUnavailable, match=r"egress refused"):
        upstream_import(url=notes.url, prefix="team", credential=SECRET_REF)
    assert notes.requests_log() == []
    assert not UpstreamTool.objects.exists()


def test_the_command_refuses_it_too(notes, settings):
    _closed(settings, notes)
    with pytest.raises(CommandError, match=r"egress refused"):
        call_command("mcp_import", notes.url, "--prefix", "team", "--credential", SECRET_REF)
    assert notes.requests_log() == []


def test_a_name_resolving_to_loopback_is_checked_by_its_address(notes, settings):
    """DNS is resolved once and the address checked: ``localhost`` is no way around the list."""
    _closed(settings, notes)
    port = notes.address.rsplit(":", 1)[1]
    with pytest.raises(UpstreamUnavailable, match=r"egress refused"):
        upstream_import(url=f"http://localhost:{port}/mcp", prefix="team", credential=SECRET_REF)
    assert notes.requests_log() == []


def test_a_non_http_scheme_is_refused(notes):
    with pytest.raises(UpstreamUnavailable, match=r"egress refused"):
        upstream_import(url="file:///etc/passwd", prefix="team")


def test_the_allow_listed_address_imports(notes):
    assert len(upstream_import(url=notes.url, prefix="team", credential=SECRET_REF).created) == 4


def test_a_refused_refresh_is_recorded_and_shown_not_raised(notes, settings):
    upstream_import(url=notes.url, prefix="team", credential=SECRET_REF)
    seen = len(notes.requests_log())
    _closed(settings, notes)
    counts = upstream_refresh()
    assert counts["unreachable"] == 4 and counts["changed"] == counts["missing"] == 0
    assert len(notes.requests_log()) == seen  # nothing sent
    rows = list(UpstreamTool.objects.all())
    assert {r.state for r in rows} == {"pinned"}
    assert all(r.check_error.startswith(f"{notes.url}: egress refused") for r in rows)
    flagged = _upstream_cards(None)["unreachable"]
    assert sorted(w["ref"] for w in flagged) == sorted(r.tool_spec.ref for r in rows)
    assert all("egress refused" in w["error"] for w in flagged)
    # Opened again: the next refresh clears the flag.
    settings.TOOLOPS_EGRESS_ALLOW = [*settings.TOOLOPS_EGRESS_ALLOW, notes.address]
    assert upstream_refresh()["pinned"] == 4
    assert _upstream_cards(None)["unreachable"] == []


def test_the_demo_notes_server_is_not_open_by_default(settings):
    settings.TOOLOPS_EGRESS_ALLOW = []
    settings.TOOLOPS_DEMO_NOTES_MCP_URL = "http://127.0.0.1:8766/mcp"
    settings.TOOLOPS_DEMO_SERVICES_URL = "http://127.0.0.1:8765"
    assert operator_openers() == frozenset()  # nor the demo services': nothing is open by default
    # `make run` opens both, explicitly, for the processes it starts — and keeps the operator's entries.
    settings.TOOLOPS_EGRESS_ALLOW = ["10.0.0.7:443"]
    assert demo_egress_allow() == "10.0.0.7:443,127.0.0.1:8766,127.0.0.1:8765"
