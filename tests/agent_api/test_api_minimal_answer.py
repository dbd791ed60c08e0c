"""``Prefer: return=minimal`` on a proposals POST: the compact answer an agent loop needs."""
from __future__ import annotations

import json

import pytest

from tests.builders import make_calendar_spec, make_grant

pytestmark = pytest.mark.django_db

MINIMAL = {"HTTP_PREFER": "return=minimal"}  # the test client takes WSGI names
WEATHER = '{"city": "Paris", "date": "2026-07-20"}'


def _call(agent):
    run = agent.run()
    return agent.model_call(run["id"])


def test_a_minimal_answer_says_what_to_hand_the_model_in_a_fraction_of_the_bytes(agent, weather):
    call = _call(agent)
    full = agent.propose(call["id"], name="weather-get_forecast_v1", arguments=WEATHER, proposal_id="c1")
    minimal = agent.propose(call["id"], name="weather-get_forecast_v1", arguments=WEATHER, proposal_id="c2", headers=MINIMAL)
    assert (full.status_code, minimal.status_code) == (201, 201)
    assert minimal["Preference-Applied"] == "return=minimal" and "Preference-Applied" not in full
    assert "Prefer" in minimal["Vary"]
    body = minimal.json()
    assert set(body) == {"id", "state", "tool", "digest", "confirmation", "error", "tool_message"}
    assert (body["state"], body["tool"], body["confirmation"], body["error"]) == ("AUTHORIZED", "weather.get_forecast@1", None, None)
    assert body["digest"] == full.json()["digest"]  # same bytes, same meaning
    assert body["tool_message"] is None  # it runs: nothing honest to say yet
    assert len(minimal.content) * 4 < len(full.content)


def test_a_rejected_call_answers_its_final_tool_message_at_once(agent, weather):
    call = _call(agent)
    body = agent.propose(call["id"], name="weather-get_forecast_v1", arguments='{"city": ', headers=MINIMAL).json()
    assert body["state"] == "PARSE_REJECTED" and body["error"]["code"]
    message = agent.get(f"/api/v1/invocations/{body['id']}/tool-message").json()
    assert body["tool_message"] == message  # exactly what the tool-message endpoint gives


def test_a_call_waiting_for_a_person_names_its_confirmation_and_the_interim_message(agent):
    spec = make_calendar_spec()
    make_grant(capability="calendar.write", operation_class="create", subject=agent.subject)
    run = agent.run()
    call = agent.model_call(run["id"], tools=[spec.ref])
    body = agent.propose(call["id"], name=spec.ref, arguments='{"calendar_id": "team", "title": "x"}', headers=MINIMAL).json()
    assert body["state"] == "AUTHORIZED" and body["confirmation"]["id"] and body["confirmation"]["expires_at"]
    assert body["tool_message"] is not None
    assert "confirm" in json.dumps(body["tool_message"]).lower()


def test_other_preferences_leave_the_full_answer(agent, weather):
    call = _call(agent)
    resp = agent.propose(call["id"], name="weather-get_forecast_v1", arguments=WEATHER, headers={"HTTP_PREFER": "return=representation"})
    assert "normalized_arguments" in resp.json() and "Preference-Applied" not in resp


def _batch(agent, n: int, headers: dict | None = None):
    call = _call(agent)
    calls = [{"id": f"call_{i}", "type": "function",
              "function": {"name": "weather-get_forecast_v1", "arguments": f'{{"city": "C{i}", "date": "2026-07-20"}}'}}
             for i in range(n)]
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    with CaptureQueriesContext(connection) as reads:
        resp = agent.post(f"/api/v1/model-calls/{call['id']}/proposals", {"tool_calls": calls}, headers=headers)
    assert resp.status_code == 201, resp.content
    return len(reads), resp.json()["invocations"]


def test_a_batch_reads_its_compact_answers_together(agent, weather):
    """The compact answers' tool messages are read once for the whole batch, not once per call."""
    _batch(agent, 2)  # warm the per-process caches (capabilities, visible sets) first
    extra_for = {}
    for n in (1, 4):
        full, _ = _batch(agent, n)
        compact, body = _batch(agent, n, MINIMAL)
        assert len(body) == n and all(set(b) >= {"id", "tool_message"} for b in body)
        extra_for[n] = compact - full
    assert extra_for[4] == extra_for[1]
