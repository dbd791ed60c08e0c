"""The operations dashboard (``/console/``) through Django's test client.

A small dataset is planted row by row (states, attempts, confirmations and runs with chosen
timestamps — the way a history looks, not how the services build it), then the page must show
exactly its counts, link to lists that hold exactly those rows, stay within a fixed number of
queries whatever the data size, serve repeated loads from the cache, and require a login.
"""
from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.cache import cache

from control import dashboard
from invocations_app.models import Run
from tests.builders import PlantedWorld
from toolops.runtime.states import State

pytestmark = pytest.mark.django_db

URL = "/console/"
INVOCATIONS = "/invocations_app/invocation/"


@pytest.fixture(autouse=True)
def _empty_cache():
    """The dashboard payload is cached per process; every test starts (and ends) without it."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def superuser(db):
    return get_user_model().objects.create_superuser("root", "root@example.invalid", None)


@pytest.fixture
def console(client, superuser):
    client.force_login(superuser)
    return client


@pytest.fixture
def world(db):
    """The planted dataset (times relative to now):

    last 24 h: 3 OBSERVED weather calls (attempts: ok, ok, rate_limited+ok), 2 FAILED_BEFORE_COMMIT
    calendar calls (business_rejected; permanent), 1 OUTCOME_UNKNOWN calendar call (timeout_unknown),
    1 AUTHORIZED calendar call whose confirmation waits since 40 min, 1 EXECUTING weather call
    (attempt running); 3 days ago: 1 OBSERVED weather call; 10 days ago: 1 OUTCOME_UNKNOWN calendar
    call; runs: one exhausted 2 h ago (tool_calls), one exhausted 3 days ago (wall_seconds), one finished.
    """
    w = PlantedWorld()
    H = timedelta(hours=1)
    w.observed = [w.invocation(State.OBSERVED, ago=2 * H, attempts=("",)),
                  w.invocation(State.OBSERVED, ago=5 * H, attempts=("",)),
                  w.invocation(State.OBSERVED, ago=20 * H, attempts=("rate_limited", ""))]
    w.failed = [w.invocation(State.FAILED_BEFORE_COMMIT, spec=w.calendar, ago=3 * H, attempts=("business_rejected",)),
                w.invocation(State.FAILED_BEFORE_COMMIT, spec=w.calendar, ago=4 * H, attempts=("permanent",))]
    w.unknown_recent = w.invocation(State.OUTCOME_UNKNOWN, spec=w.calendar, ago=6 * H, attempts=("timeout_unknown",))
    w.waiting = w.invocation(State.AUTHORIZED, spec=w.calendar, ago=timedelta(minutes=41))
    w.confirmation = w.pending_confirmation(w.waiting, ago=timedelta(minutes=40))
    w.executing = w.invocation(State.EXECUTING, ago=timedelta(minutes=1), attempts=("running",))
    w.old_observed = w.invocation(State.OBSERVED, ago=timedelta(days=3), attempts=("",))
    w.unknown_old = w.invocation(State.OUTCOME_UNKNOWN, spec=w.calendar, ago=timedelta(days=10, hours=2))
    w.make_run(status=Run.Status.EXHAUSTED, ended_ago=2 * H, reason="tool_calls budget exhausted")
    w.make_run(status=Run.Status.EXHAUSTED, ended_ago=timedelta(days=3), reason="wall_seconds budget exhausted")
    w.make_run(status=Run.Status.FINISHED, ended_ago=H, reason="finished by the agent runtime")
    return w


def _page(resp) -> str:
    assert resp.status_code == 200, resp.status_code
    return resp.content.decode()


def _testid(page: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}"[^>]*>(.*?)<', page, re.S)
    assert match, f"no element with data-testid={testid}"
    return match.group(1).strip()


def _rows(page: str, testid: str, key: str) -> dict[str, int]:
    """{data-<key>: data-count} for every ``data-testid=testid`` row."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        rf'data-testid="{testid}" data-{key}="([^"]*)" data-count="(\d+)"', page)}


def _href(page: str, testid: str) -> str:
    match = re.search(rf'href="([^"]+)" data-testid="{testid}"', page)
    assert match, f"no link with data-testid={testid}"
    return match.group(1).replace("&amp;", "&")


# --- access ------------------------------------------------------------------------------------

def test_it_requires_a_login(client):
    resp = client.get(URL)
    assert resp.status_code == 302
    assert resp["Location"].startswith("/login/") and "next=/console/" in resp["Location"]


def test_staff_without_the_view_permission_is_refused(client, world):
    user = get_user_model().objects.create_user("approver", "a@example.invalid", None, is_staff=True)
    client.force_login(user)
    assert client.get(URL).status_code == 403


def test_staff_with_the_view_permission_see_it(client, world):
    user = get_user_model().objects.create_user("support", "s@example.invalid", None, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_invocation", content_type__app_label="invocations_app"))
    client.force_login(user)
    page = _page(client.get(URL))
    assert _testid(page, "pending-count") == "1"


# --- the numbers ------------------------------------------------------------------------------------

def test_it_shows_the_counts_of_the_planted_dataset(console, world):
    page = _page(console.get(URL))
    assert _testid(page, "pending-count") == "1"
    assert _testid(page, "pending-oldest").startswith("oldest waiting 40 min")
    assert _testid(page, "unknown-count") == "2"
    assert _testid(page, "unknown-oldest") == "oldest 10 d 2 h old"  # by creation time
    assert _testid(page, "executing-count") == "1"
    assert _testid(page, "total-count") == "8"  # the 3- and 10-day-old calls are outside 24 h
    assert _testid(page, "failed-count") == "2"
    assert _testid(page, "exhausted-count") == "1"
    assert _rows(page, "state-row", "state") == {
        "OBSERVED": 3, "FAILED_BEFORE_COMMIT": 2, "OUTCOME_UNKNOWN": 1, "AUTHORIZED": 1, "EXECUTING": 1,
    }
    in_flight = _rows(page, "in-flight-row", "state")
    assert (in_flight["OUTCOME_UNKNOWN"], in_flight["AUTHORIZED"], in_flight["EXECUTING"], in_flight["PREPARED"]) == (2, 1, 1, 0)
    assert _rows(page, "pending-tool-row", "tool") == {"calendar.create_event@1": 1}
    assert _rows(page, "unknown-tool-row", "tool") == {"calendar.create_event": 2}
    assert _rows(page, "exhausted-row", "reason") == {"tool_calls budget exhausted": 1}

    tools = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(
        r'data-testid="tool-row" data-tool="([^"]+)" data-attempts="(\d+)" data-failed="(\d+)"', page)}
    assert tools == {"weather.get_forecast": (5, 1), "calendar.create_event": (3, 3)}
    d = console.get(URL).context["d"]
    classes = {t.tool: {c: n for c, n, _colour, _pct in t.classes} for t in d.tools}
    assert classes == {
        "weather.get_forecast": {"ok": 3, "running": 1, "rate_limited": 1},
        "calendar.create_event": {"business_rejected": 1, "permanent": 1, "timeout_unknown": 1},
    }
    assert [n for _label, n, _pct in d.pending_ages] == [0, 0, 1, 0, 0]  # the 40-minute wait: "15–60 min"
    assert [label for label, *_ in d.pending_ages] == ["< 5 min", "5–15 min", "15–60 min", "1–4 h", "> 4 h"]


def test_the_7_day_window_includes_older_calls(console, world):
    page = _page(console.get(URL, {"window": "7d"}))
    assert _testid(page, "total-count") == "9"
    assert _rows(page, "state-row", "state")["OBSERVED"] == 4
    assert _testid(page, "exhausted-count") == "2"
    assert _testid(page, "unknown-count") == "2"  # queues are "now", whatever the window
    assert 'data-window="7d"' in page


def test_an_unknown_window_falls_back_to_24_hours(console, world):
    page = _page(console.get(URL, {"window": "all-time"}))
    assert 'data-window="24h"' in page and _testid(page, "total-count") == "8"


def test_an_empty_database_renders(console):
    page = _page(console.get(URL))
    assert _testid(page, "pending-count") == "0" and _testid(page, "unknown-count") == "0"
    assert "No invocations in this window." in page and "Nothing is waiting for a decision." in page


# --- links ---------------------------------------------------------------------------------------------

def _listed_ids(console, url: str) -> set[str]:
    page = _page(console.get(url))
    assert "?e=1" not in page
    ids = set(re.findall(r'/invocations_app/invocation/([0-9a-f-]{36})/change/', page))
    return ids


def test_it_links_to_the_queues_and_the_filtered_lists(console, world):
    page = _page(console.get(URL))
    assert _href(page, "tile-pending") == "/console/confirmations/"
    assert _href(page, "tile-unknown") == "/console/unknown-outcomes/"
    assert _href(page, "tile-executing") == f"{INVOCATIONS}?state__exact=EXECUTING"
    assert _href(page, "tile-exhausted") == "/invocations_app/run/?status__exact=exhausted"

    # The state list of the chart: exactly the calls the chart counted.
    unknown_link = re.search(r'href="([^"]+)">OUTCOME_UNKNOWN</a>', page).group(1).replace("&amp;", "&")
    query = parse_qs(urlsplit(unknown_link).query)
    assert query["state__exact"] == ["OUTCOME_UNKNOWN"] and "created_at__gte" in query
    assert _listed_ids(console, unknown_link) == {str(world.unknown_recent.pk)}
    # The in-flight row: every OUTCOME_UNKNOWN call, old ones included.
    assert _listed_ids(console, f"{INVOCATIONS}?state__exact=OUTCOME_UNKNOWN") == {
        str(world.unknown_recent.pk), str(world.unknown_old.pk)}
    # The "failed" tile: both failure states in the window.
    assert _listed_ids(console, _href(page, "tile-failed")) == {str(i.pk) for i in world.failed}
    # A tool's failure link.
    calendar = next(t for t in console.get(URL).context["d"].tools if t.tool == "calendar.create_event")
    failed = calendar.failed_url
    assert f'href="{failed.replace("&", "&amp;")}"' in page
    assert "tool_name=calendar.create_event" in failed
    assert _listed_ids(console, failed) == {str(i.pk) for i in world.failed}
    # Pending confirmations per tool link to the queue filtered by that ToolSpec.
    assert f'href="/console/confirmations/?tool={world.calendar.pk}"' in page
    assert console.get(f"/console/confirmations/?tool={world.calendar.pk}").status_code == 200
    assert console.get("/invocations_app/run/?status__exact=exhausted").status_code == 200


def test_stacked_bars_link_to_their_hour(console, world):
    d = console.get(URL).context["d"]
    segment = next(s for s in d.stack if "OUTCOME_UNKNOWN" in s.title)
    assert _listed_ids(console, segment.url) == {str(world.unknown_recent.pk)}


def test_the_admin_index_links_to_the_dashboard_and_keeps_the_queues(console, world):
    page = _page(console.get("/"))
    assert 'href="/console/"' in page and 'data-testid="dashboard-link"' in page
    assert 'id="confirmation-queue-link"' in page and 'id="unknown-queue-link"' in page


def test_the_admin_index_hides_the_link_without_the_permission(client, world):
    user = get_user_model().objects.create_user("approver", "a@example.invalid", None, is_staff=True)
    client.force_login(user)
    page = _page(client.get("/"))
    assert 'data-testid="dashboard-link"' not in page and 'id="confirmation-queue-link"' in page


# --- cost -----------------------------------------------------------------------------------------------

# session + user + the five grouped queries of ``build_dashboard`` + its quarantined MCP tools.
COLD_QUERIES = 8


def test_it_uses_a_bounded_number_of_queries(console, world, django_assert_max_num_queries):
    with django_assert_max_num_queries(COLD_QUERIES):
        _page(console.get(URL))


def test_the_number_of_queries_does_not_grow_with_the_data(console, world, django_assert_num_queries):
    with django_assert_num_queries(COLD_QUERIES):
        _page(console.get(URL))
    for k in range(30):
        inv = world.invocation(State.OBSERVED, spec=world.calendar if k % 2 else world.weather,
                               ago=timedelta(hours=k % 20 + 1), attempts=("transient", ""))
        world.pending_confirmation(world.invocation(State.AUTHORIZED, spec=world.calendar, ago=timedelta(minutes=k + 1)),
                                   ago=timedelta(minutes=k))
        world.make_run(status=Run.Status.EXHAUSTED, ended_ago=timedelta(hours=k % 20), reason=f"reason {k % 3}")
        assert inv.pk
    cache.clear()
    with django_assert_num_queries(COLD_QUERIES):
        page = _page(console.get(URL))
    assert _testid(page, "pending-count") == "31"


def test_it_caches_the_payload(console, world, django_assert_num_queries):
    first = _page(console.get(URL))
    assert 'data-from-cache="0"' in first
    world.invocation(State.OUTCOME_UNKNOWN, spec=world.calendar, ago=timedelta(hours=1))
    with django_assert_num_queries(2):  # session + user only
        second = _page(console.get(URL))
    assert 'data-from-cache="1"' in second
    assert _testid(second, "unknown-count") == "2"  # still the cached numbers
    assert _page(console.get(URL, {"window": "7d"})).count('data-from-cache="0"') == 1  # one entry per window
    cache.delete(dashboard.CACHE_KEY.format(window="24h", scope="all"))  # what the 15 s expiry does
    assert _testid(_page(console.get(URL)), "unknown-count") == "3"


def test_the_cache_expires_after_its_timeout(console, world, monkeypatch):
    stored = {}
    monkeypatch.setattr(dashboard.cache, "set", lambda key, value, timeout: stored.update({key: timeout}))
    _page(console.get(URL))
    assert stored == {
        dashboard.CACHE_KEY.format(window="24h", scope="all"): dashboard.CACHE_SECONDS,
        dashboard.ATTEMPTS_CACHE_KEY.format(window="24h", scope="all"): dashboard.ATTEMPTS_CACHE_SECONDS["24h"],
    }
    assert dashboard.CACHE_SECONDS <= 30 and dashboard.ATTEMPTS_CACHE_SECONDS["24h"] <= 120


def test_attempts_are_kept_longer_than_the_rest(console, world, django_assert_num_queries):
    _page(console.get(URL))
    world.invocation(State.FAILED_BEFORE_COMMIT, spec=world.calendar, ago=timedelta(hours=1), attempts=("permanent",))
    cache.delete(dashboard.CACHE_KEY.format(window="24h", scope="all"))  # the 15 s payload expired, the attempts did not
    with django_assert_num_queries(COLD_QUERIES - 1):
        page = _page(console.get(URL))
    assert _testid(page, "failed-count") == "3"  # states are fresh
    tools = dict(re.findall(r'data-testid="tool-row" data-tool="([^"]+)" data-attempts="(\d+)"', page))
    assert tools["calendar.create_event"] == "3"  # attempts as of the first load
    cache.clear()
    page = _page(console.get(URL))
    assert dict(re.findall(r'data-testid="tool-row" data-tool="([^"]+)" data-attempts="(\d+)"', page))["calendar.create_event"] == "4"


def test_sparkline_geometry():
    s = dashboard.spark([0, 5, 10], width=100, height=20)
    assert s.points == "0.0,19.0 50.0,10.0 100.0,1.0"
    assert s.area.startswith("0,20 ") and s.area.endswith(" 100,20")
    assert (s.peak, s.last) == (10, 10)
    flat = dashboard.spark([0, 0, 0], width=100, height=20)
    assert flat.points == "0.0,19.0 50.0,19.0 100.0,19.0"

