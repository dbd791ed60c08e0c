"""Decision links: open the decision page after login, once, before expiry, for their own person only."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from invocations_app.decision_links import decision_link_token
from invocations_app.models import DecisionLinkUse
from tests.builders import PASSWORD, allow_approving, make_approver, make_staff, make_tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def ann(pending):
    return make_approver(username="ann", spec=pending.tool_spec)[0]


def _link(token: str) -> str:
    return f"/console/confirmations/link/{token}/"


def test_it_opens_the_decision_page_once_and_decides_nothing(client, ann, pending):
    token = decision_link_token(confirmation=pending, user=ann)
    client.login(username="ann", password=PASSWORD)
    page = client.get(_link(token))
    assert page.status_code == 200 and b'data-testid="link-open"' in page.content
    assert not DecisionLinkUse.objects.exists()  # a GET only reads
    opened = client.post(_link(token) + "open")
    assert opened.status_code == 302 and opened["Location"] == f"/console/confirmations/{pending.pk}/"
    pending.refresh_from_db()
    assert pending.state == "pending"  # opening is not deciding
    again = client.post(_link(token) + "open")
    assert again.status_code == 410 and b'data-reason="used"' in again.content
    assert client.get(_link(token)).status_code == 410


def test_it_asks_for_a_login_first(client, ann, pending):
    resp = client.get(_link(decision_link_token(confirmation=pending, user=ann)))
    assert resp.status_code == 302 and "/login/" in resp["Location"]


def test_it_refuses_an_altered_link(client, ann, pending):
    token = decision_link_token(confirmation=pending, user=ann)
    client.login(username="ann", password=PASSWORD)
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    for resp in (client.get(_link(tampered)), client.post(_link(tampered) + "open")):
        assert resp.status_code == 400 and b'data-reason="altered"' in resp.content
    assert not DecisionLinkUse.objects.exists()


def test_it_refuses_someone_elses_link(client, ann, pending):
    make_approver(username="bob", spec=pending.tool_spec)
    token = decision_link_token(confirmation=pending, user=ann)
    client.login(username="bob", password=PASSWORD)
    resp = client.post(_link(token) + "open")
    assert resp.status_code == 403 and b'data-reason="foreign"' in resp.content
    assert not DecisionLinkUse.objects.exists()


def test_it_refuses_an_expired_link(client, ann, pending):
    token = decision_link_token(confirmation=pending, user=ann, expires_at=timezone.now() - timedelta(seconds=1))
    client.login(username="ann", password=PASSWORD)
    resp = client.post(_link(token) + "open")
    assert resp.status_code == 410 and b'data-reason="expired"' in resp.content
    assert not DecisionLinkUse.objects.exists()


def test_it_says_when_the_confirmation_was_decided_meanwhile(client, ann, pending):
    token = decision_link_token(confirmation=pending, user=ann)
    pending.state = "denied"
    pending.save(update_fields=["state"])
    client.login(username="ann", password=PASSWORD)
    resp = client.get(_link(token))
    assert resp.status_code == 410 and b'data-reason="decided"' in resp.content


def test_it_shows_nothing_of_the_call_to_a_person_who_may_not_decide_it(client, pending):
    """A link whose person may not decide the call (here an approver of the same tool in another
    tenant, as links were once issued): 404, no tenant, tool or digest — pending or decided — and
    it cannot be spent."""
    olga = make_staff(username="olga")
    allow_approving(user=olga, spec=pending.tool_spec, tenant=make_tenant(slug="elsewhere"))
    token = decision_link_token(confirmation=pending, user=olga)
    client.login(username="olga", password=PASSWORD)
    for state in ("pending", "denied"):
        pending.state = state
        pending.save(update_fields=["state"])
        for resp in (client.get(_link(token)), client.post(_link(token) + "open")):
            page = resp.content.decode()
            assert resp.status_code == 404 and 'data-reason="not_approver"' in page, (state, page)
            for detail in (pending.tenant.slug, pending.tool_spec.name, pending.digest[:12]):
                assert detail not in page, (state, detail)
    assert not DecisionLinkUse.objects.exists()
