"""Personal tokens are issued in the console by their owner, shown once, stored hashed."""
from __future__ import annotations

import re

import pytest

from specs_app.models import PersonalToken
from specs_app.services import token_hash
from tests.builders import PASSWORD, make_staff

pytestmark = pytest.mark.django_db


def test_it_shows_the_secret_once_and_stores_only_its_hash(client):
    user = make_staff(username="ann")
    client.login(username="ann", password=PASSWORD)
    page = client.post("/console/tokens/issue", {"label": "chat bot"}).content.decode()
    secret = re.search(r"<code>(tkp_[^<]+)</code>", page).group(1)
    token = PersonalToken.objects.get(user=user)
    assert token.token_hash == token_hash(secret) and token.label == "chat bot"
    assert secret not in client.get("/console/tokens/").content.decode()  # never again
    assert not PersonalToken.objects.filter(token_hash=secret).exists()


def test_it_lets_a_person_revoke_only_their_own_tokens(client):
    make_staff(username="ann")
    bob = make_staff(username="bob")
    client.login(username="ann", password=PASSWORD)
    client.post("/console/tokens/issue", {"label": "mine"})
    mine = PersonalToken.objects.get(user__username="ann")
    client.logout()
    client.login(username="bob", password=PASSWORD)
    assert client.post(f"/console/tokens/{mine.pk}/revoke").status_code == 404
    mine.refresh_from_db()
    assert mine.revoked_at is None
    client.post("/console/tokens/issue", {"label": "bob's"})
    bobs = PersonalToken.objects.get(user=bob)
    assert client.post(f"/console/tokens/{bobs.pk}/revoke").status_code == 302
    bobs.refresh_from_db()
    assert bobs.revoked_at is not None
