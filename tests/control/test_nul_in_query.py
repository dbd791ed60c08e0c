"""A NUL in a page's query string (``%00``) never reaches PostgreSQL: the console's queues and
counts and the admin's list filters answer 400, not a 500; a malformed ``?tool=`` is ignored."""
from __future__ import annotations

import pytest

from tests.builders import make_staff

pytestmark = pytest.mark.django_db

PAGES = [
    "/console/confirmations/?tenant=%00",
    "/console/confirmations/count.json?tenant=%00",
    "/console/unknown-outcomes/?tenant=%00",
    "/invocations_app/invocation/?state__exact=%00",
    "/invocations_app/run/?status__exact=%00",
    "/invocations_app/webhookdelivery/?event_type__exact=%00",
    "/specs_app/toolspec/?status__exact=%00",
    "/specs_app/upstreamtool/?state__exact=%00",
    "/invocations_app/invocation/?%00=1",
]


@pytest.fixture
def console(client):
    client.force_login(make_staff(username="root", superuser=True))
    client.raise_request_exception = False  # the answer a browser gets, a 500 included
    return client


@pytest.mark.parametrize("url", PAGES)
def test_a_nul_in_the_query_string_is_a_400(console, url):
    resp = console.get(url)
    assert resp.status_code == 400, (url, resp.status_code)
    assert b"NUL" in resp.content


@pytest.mark.parametrize("url", ["/console/confirmations/?tool=%C2%B2", "/console/confirmations/count.json?tool=%C2%B2",
                                 "/console/unknown-outcomes/?tool=%C2%B2"])
def test_a_tool_id_that_is_no_number_is_ignored(console, url):
    assert console.get(url).status_code == 200  # "²" is a digit to str.isdigit, not to int()


def test_the_same_filters_still_work_without_a_nul(console):
    assert console.get("/console/confirmations/?tenant=acme&tool=7").status_code == 200
    assert console.get("/invocations_app/invocation/?state__exact=OBSERVED").status_code == 200
