import pytest

from invocations_app.models import Confirmation
from tests.builders import make_demo_spec, make_grant
from tests.invocations.conftest import _fast_password_hashing, agent  # noqa: F401 - the same fixtures here

ARGS = '{"calendar_id": "primary", "title": "Passport", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}'


@pytest.fixture
def calendar(db):
    return make_demo_spec(name="calendar.create_event")


def propose_calendar(agent, calendar, arguments: str = ARGS) -> Confirmation:
    """One calendar call from ``agent``, waiting for a person; its pending confirmation."""
    make_grant(subject=agent.subject, capability="calendar.write", operation_class="create",
               scope_kind="exact", scope_values=["primary", "work"])
    run = agent.run()
    call = agent.model_call(run["id"], tools=[calendar.ref])
    inv = agent.propose(call["id"], name=calendar.ref, arguments=arguments).json()
    assert inv["state"] == "AUTHORIZED" and inv["confirmation"]["state"] == "pending", inv
    return Confirmation.objects.get(invocation_id=inv["id"])


@pytest.fixture
def pending(agent, calendar):
    return propose_calendar(agent, calendar)
