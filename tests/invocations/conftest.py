import pytest
from rest_framework.test import APIClient

from tests.builders import Agent, make_grant, make_token, make_toolspec


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Staff and approvers are made with passwords; Django's PBKDF2 spends ~0.2 s of CPU per hash
    by design. Nothing here tests the hasher (Django's advice for test suites)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def weather(db):
    return make_toolspec()


@pytest.fixture
def agent(db):
    subject, token = make_token()
    make_grant(subject=subject)  # weather.read on any city
    a = Agent(APIClient(), token)
    a.subject = subject
    return a
