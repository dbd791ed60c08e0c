"""Admission through the REST API: docs/concepts/failures.md rows 1–3, digests, replay rules, shapes, auth."""
from __future__ import annotations

import base64
import json

import pytest

from tests.builders import make_toolspec

pytestmark = pytest.mark.django_db


def _call(agent, **body):
    run = agent.run()
    return run, agent.model_call(run["id"], **body)


def test_it_validates_a_good_proposal_and_records_every_layer(agent, weather):
    _, call = _call(agent)
    resp = agent.propose(call["id"], name="weather-get_forecast_v1", arguments='{"city": "Paris", "date": "2026-07-20"}')
    assert resp.status_code == 201, resp.content
    inv = resp.json()
    assert inv["state"] == "AUTHORIZED"  # read-only, granted, no confirmation needed
    assert inv["tool"] == "weather.get_forecast@1"
    assert inv["normalized_arguments"] == {"city": "Paris", "date": "2026-07-20"}
    assert len(inv["digest"]) == 64
    assert inv["proposal"]["parser"]["name"] == "toolops.strict_json"
    assert inv["proposal"]["parser"]["max_depth"] == 64
    schema_record = inv["validation"]["schema"]
    assert schema_record["validator"] == "jsonschema" and schema_record["validator_version"]
    assert schema_record["dialect"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema_record["format_assertion"] is False
    assert inv["normalization_context"]["timezone"] == "Asia/Shanghai"
    events = agent.get(f"/api/v1/invocations/{inv['id']}/events").json()
    assert [(e["from_state"], e["to_state"]) for e in events] == [
        ("", "PROPOSED"), ("PROPOSED", "PARSED"), ("PARSED", "VALIDATED"), ("VALIDATED", "AUTHORIZED")
    ]
    assert [e["seq"] for e in events] == [1, 2, 3, 4]


def test_it_rejects_an_unknown_version_with_the_visible_names(agent, weather):
    """docs/concepts/failures.md row 1: no near-name matching, and the answer lists what *was* visible."""
    make_toolspec(version=2)
    _, call = _call(agent, tools=["weather.get_forecast@1"])
    for name in ("weather.get_forecast@2", "weather-get_forecast_v2", "weather.get_forecast", "weather-get_forecast_v01"):
        inv = agent.propose(call["id"], name=name, arguments='{"city":"Paris","date":"2026-07-20"}').json()
        assert inv["state"] == "VALIDATION_REJECTED", name
        assert inv["error"]["code"] == "unknown_tool"
        assert inv["error"]["detail"]["visible"] == ["weather.get_forecast@1"]
        assert inv["tool"] is None


def test_it_rejects_an_extra_field_by_additional_properties(agent, weather):
    """docs/concepts/failures.md row 2."""
    _, call = _call(agent)
    inv = agent.propose(
        call["id"], name="weather.get_forecast@1", arguments='{"city":"Paris","date":"2026-07-20","units":"metric"}'
    ).json()
    assert inv["state"] == "VALIDATION_REJECTED"
    assert inv["error"]["code"] == "validation_rejected"
    assert inv["error"]["detail"]["layer"] == "schema"
    assert [i["keyword"] for i in inv["error"]["detail"]["issues"]] == ["additionalProperties"]


def test_it_catches_a_bad_date_in_the_semantic_layer_when_format_assertion_is_off(agent, weather):
    """docs/concepts/failures.md row 3: the schema passes (format is an annotation), the date normalizer catches it."""
    _, call = _call(agent)
    inv = agent.propose(call["id"], name="weather.get_forecast@1", arguments='{"city":"Paris","date":"2026-02-30"}').json()
    assert inv["state"] == "VALIDATION_REJECTED"
    assert inv["error"]["code"] == "normalization_rejected"
    assert inv["error"]["detail"]["layer"] == "semantic"
    assert inv["error"]["detail"]["pointer"] == "/date"
    assert inv["validation"]["schema"]["valid"] is True
    assert inv["validation"]["schema"]["format_assertion"] is False
    assert inv["validation"]["semantic"]["valid"] is False


def test_it_catches_a_bad_date_in_the_schema_layer_when_format_assertion_is_on(agent):
    make_toolspec(name="weather.strict", format_assertion=True)
    _, call = _call(agent, tools=["weather.strict@1"])
    inv = agent.propose(call["id"], name="weather.strict@1", arguments='{"city":"Paris","date":"2026-02-30"}').json()
    assert inv["state"] == "VALIDATION_REJECTED"
    assert inv["error"]["detail"]["layer"] == "schema"
    assert inv["error"]["detail"]["issues"][0]["keyword"] == "format"


def test_it_reports_every_schema_error_not_only_the_first(agent, weather):
    _, call = _call(agent)
    inv = agent.propose(call["id"], name="weather.get_forecast@1", arguments='{"city": 5, "x": 1}').json()
    keywords = sorted(i["keyword"] for i in inv["error"]["detail"]["issues"])
    assert keywords == ["additionalProperties", "required", "type"]


def test_it_records_unparsable_bytes_as_parse_rejected(agent, weather):
    _, call = _call(agent)
    raw = b'{"city": "Par\xffis"}'
    resp = agent.propose(call["id"], name="weather.get_forecast@1", arguments_b64=base64.b64encode(raw).decode())
    inv = resp.json()
    assert resp.status_code == 201
    assert inv["state"] == "PARSE_REJECTED"
    assert inv["error"]["code"] == "parse_rejected"
    assert inv["error"]["detail"]["reason"] == "invalid_utf8"
    assert base64.b64decode(inv["proposal"]["arguments_bytes_b64"]) == raw


def test_it_gives_equivalent_proposals_the_same_digest(agent, weather):
    _, call = _call(agent)
    texts = ['{"city":"Paris","date":"2026-07-20"}', '{ "date" : "2026-07-20",\n "city" : "Paris" }']
    digests = {agent.propose(call["id"], name="weather.get_forecast@1", arguments=t).json()["digest"] for t in texts}
    assert len(digests) == 1
    other = agent.propose(call["id"], name="weather.get_forecast@1", arguments='{"city":"Lyon","date":"2026-07-20"}')
    assert other.json()["digest"] not in digests


def test_it_gives_relative_and_explicit_dates_the_same_digest_under_the_same_clock(weather):
    """'tomorrow' vs the explicit date: same meaning under the recorded clock and zone, same digest."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from invocations_app import admission, runs
    from tests.builders import make_subject

    subject = make_subject()
    run = runs.run_create(subject=subject, budgets={}, timezone_name="Asia/Shanghai", locale="en-US", metadata={}, trace=None)
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    clock = datetime(2026, 7, 19, 14, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
    admitted = [
        admission.proposal_admit(model_call=call, subject=subject, proposal_id=f"p{i}", name="weather.get_forecast@1",
                                arguments_bytes=raw, now=clock)[0]
        for i, raw in enumerate([b'{"city":"Paris","date":"tomorrow"}', b'{"city":"Paris","date":"2026-07-20"}',
                                 b'{"city":"Paris","date":"2026-07-21"}'])
    ]
    assert admitted[0].normalized_arguments == {"city": "Paris", "date": "2026-07-20"}
    assert admitted[0].digest == admitted[1].digest
    assert admitted[2].digest != admitted[0].digest


def test_it_returns_the_same_invocation_for_a_replayed_proposal_and_409_for_other_bytes(agent, weather):
    _, call = _call(agent)
    args = '{"city":"Paris","date":"2026-07-20"}'
    first = agent.propose(call["id"], name="weather.get_forecast@1", arguments=args, proposal_id="call_1")
    again = agent.propose(call["id"], name="weather.get_forecast@1", arguments=args, proposal_id="call_1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = agent.propose(call["id"], name="weather.get_forecast@1", arguments=args + " ", proposal_id="call_1")
    assert other.status_code == 409
    assert other["Content-Type"] == "application/problem+json"
    assert other.json()["code"] == "proposal_conflict"


def test_it_accepts_openai_shaped_tool_calls(agent, weather):
    _, call = _call(agent)
    body = {"tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "weather-get_forecast_v1", "arguments": '{"city":"A","date":"2026-07-20"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "weather-get_forecast_v1", "arguments": "{oops"}},
    ]}
    resp = agent.post(f"/api/v1/model-calls/{call['id']}/proposals", body)
    assert resp.status_code == 201
    states = [(i["proposal"]["proposal_id"], i["state"]) for i in resp.json()["invocations"]]
    assert states == [("call_a", "AUTHORIZED"), ("call_b", "PARSE_REJECTED")]


def test_it_refuses_a_body_with_both_or_neither_argument_forms(agent, weather):
    _, call = _call(agent)
    url = f"/api/v1/model-calls/{call['id']}/proposals"
    for body in ({"proposal_id": "x", "name": "n"}, {"proposal_id": "x", "name": "n", "arguments": "{}", "arguments_b64": "e30="}):
        resp = agent.post(url, body)
        assert resp.status_code == 400
        assert resp.json()["code"] == "malformed_request"
    assert agent.post(url, {"proposal_id": "x", "name": "n", "arguments_b64": "!!"}).status_code == 400


def test_it_answers_problem_json_without_a_token(client, weather):
    resp = client.get("/api/v1/tools")
    assert resp.status_code == 401
    assert resp["Content-Type"] == "application/problem+json"
    assert resp.json()["code"] == "unauthenticated"
    assert "traceparent" in resp


def test_it_hides_other_tenants_objects(agent, weather):
    from rest_framework.test import APIClient

    from tests.builders import Agent, make_token

    _, call = _call(agent)
    inv = agent.propose(call["id"], name="weather.get_forecast@1", arguments='{"city":"A","date":"2026-07-20"}').json()
    _, other_token = make_token()
    other = Agent(APIClient(), other_token)
    for path in (f"/api/v1/invocations/{inv['id']}", f"/api/v1/invocations/{inv['id']}/events", f"/api/v1/runs/{inv['run_id']}"):
        resp = other.get(path)
        assert resp.status_code == 404, path
        assert resp.json()["code"] == "not_found"
    assert other.post(f"/api/v1/model-calls/{call['id']}/proposals", {"proposal_id": "x", "name": "n", "arguments": "{}"}).status_code == 404


def test_it_continues_the_callers_trace(agent, weather):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    resp = agent.post("/api/v1/runs", {"timezone": "UTC"}, headers={"HTTP_TRACEPARENT": f"00-{trace_id}-00f067aa0ba902b7-01"})
    assert resp.json()["trace_id"] == trace_id
    assert resp["traceparent"].split("-")[1] == trace_id


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "mcp"])
def test_it_renders_tools_with_an_exact_name_map(agent, weather, fmt):
    body = agent.get("/api/v1/tools", format=fmt).json()
    assert body["name_map"] == {"weather-get_forecast_v1": "weather.get_forecast@1"}
    assert len(body["tools"]) == 1


def test_it_records_the_exact_visible_set_of_a_model_call(agent, weather):
    make_toolspec(version=2)
    run, call = _call(agent, format="anthropic")
    assert call["name_map"] == {"weather-get_forecast_v2": "weather.get_forecast@2"}
    assert call["tools"][0]["name"] == "weather-get_forecast_v2"
    resp = agent.post(f"/api/v1/runs/{run['id']}/model-calls", {"tools": ["weather.get_forecast@9"]})
    assert resp.status_code == 400 and resp.json()["code"] == "unknown_tool"


def test_it_serves_an_openapi_schema_and_docs(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    paths = json.loads(schema.content)["paths"]
    assert "/api/v1/model-calls/{model_call_id}/proposals" in paths
    assert client.get("/api/docs/").status_code == 200


def test_it_serves_the_schema_as_json_when_asked_with_format_json(client):
    as_json = client.get("/api/schema/?format=json")
    assert as_json.status_code == 200 and "json" in as_json["Content-Type"]
    assert json.loads(as_json.content)["openapi"].startswith("3.")
    as_yaml = client.get("/api/schema/?format=yaml")
    assert as_yaml.status_code == 200 and as_yaml.content.startswith(b"openapi: 3.")
