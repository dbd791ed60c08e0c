import pytest
from rest_framework.test import APIClient

from tests.builders import Agent, make_grant, make_token, make_toolspec


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
