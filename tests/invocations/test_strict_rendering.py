"""OpenAI strict-mode renderings through the API: metadata exposed, nulls mapped back at admission.

A strict rendering makes an optional argument required and nullable, so a strict model sends
``null`` where it means "absent". Admission removes such nulls — only for a call whose recorded
rendering was strict, and only at the recorded paths — *before* the ToolSpec's own schema
validates, records what it removed, and digests the arguments without them.
"""
from __future__ import annotations

import json

import pytest

from audit.checks import DIGEST_NOT_REPRODUCIBLE, audit
from invocations_app.models import Invocation
from tests.builders import DIALECT, make_toolspec

pytestmark = pytest.mark.django_db

OPTIONAL_UNIT = {
    "$schema": DIALECT,
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "date": {"type": "string", "format": "date"},
        "unit": {"type": "string", "enum": ["c", "f"]},
    },
    "required": ["city", "date"],
    "additionalProperties": False,
}
FREE_FORM = {**OPTIONAL_UNIT, "properties": {**OPTIONAL_UNIT["properties"], "extra": {"type": "object"}}}
ARGS_WITH_NULL = json.dumps({"city": "Paris", "date": "2026-07-20", "unit": None})


@pytest.fixture
def optional_unit(weather):
    return make_toolspec(name="weather.optional", schema=OPTIONAL_UNIT)


def _call(agent, fmt: str, tools: list[str]):
    run = agent.run()
    return agent.model_call(run["id"], format=fmt, tools=tools)


def test_it_exposes_strict_and_its_reason_next_to_the_definitions(agent, optional_unit):
    make_toolspec(name="weather.freeform", schema=FREE_FORM)
    listing = agent.get("/api/v1/tools", format="openai").json()
    assert set(listing) >= {"format", "tools", "name_map", "renderings"}
    by_name = {t["function"]["name"]: t["function"] for t in listing["tools"]}
    assert by_name["weather-optional_v1"]["strict"] is True
    assert by_name["weather-optional_v1"]["parameters"]["required"] == ["city", "date", "unit"]
    assert listing["renderings"]["weather-optional_v1"] == {
        "strict": True, "strict_reason": None, "null_as_absent": ["/unit"]
    }
    assert by_name["weather-freeform_v1"]["strict"] is False
    assert listing["renderings"]["weather-freeform_v1"]["strict_reason"] == (
        "object without declared properties (free-form) at /properties/extra"
    )
    call = _call(agent, "openai", ["weather.optional@1"])
    assert call["renderings"] == {"weather-optional_v1": {"strict": True, "strict_reason": None, "null_as_absent": ["/unit"]}}
    assert agent.get("/api/v1/tools", format="anthropic").json()["renderings"]["weather-optional_v1"] == {}


def test_it_maps_a_strict_null_to_absent_before_validation_and_records_it(agent, optional_unit):
    call = _call(agent, "openai", ["weather.optional@1"])
    inv = agent.propose(call["id"], name="weather-optional_v1", arguments=ARGS_WITH_NULL).json()
    assert inv["state"] == "AUTHORIZED", inv.get("error")
    assert inv["normalized_arguments"] == {"city": "Paris", "date": "2026-07-20"}
    assert inv["validation"]["strict_rendering"] == {"null_as_absent": ["/unit"], "removed": ["/unit"]}
    assert inv["validation"]["schema"]["valid"] is True
    # Same digest as a call that left the argument out: null meant absent.
    plain = agent.propose(call["id"], name="weather-optional_v1", arguments='{"city":"Paris","date":"2026-07-20"}').json()
    assert plain["digest"] == inv["digest"]
    assert plain["validation"]["strict_rendering"] == {"null_as_absent": ["/unit"], "removed": []}
    # The audit re-admits the stored bytes with the recorded mapping: the digest reproduces.
    assert list(audit(kinds=[DIGEST_NOT_REPRODUCIBLE])) == []
    sql_free_of_mapping = Invocation.objects.get(pk=inv["id"])
    sql_free_of_mapping.validation = {k: v for k, v in sql_free_of_mapping.validation.items() if k != "strict_rendering"}
    Invocation.objects.filter(pk=inv["id"]).update(validation=sql_free_of_mapping.validation)
    # Without the recorded mapping the stored bytes no longer validate: the record matters.
    assert [v.invocation_id for v in audit(kinds=[DIGEST_NOT_REPRODUCIBLE])] == [inv["id"]]


def test_it_still_validates_what_a_strict_model_sends(agent, optional_unit):
    call = _call(agent, "openai", ["weather.optional@1"])
    inv = agent.propose(call["id"], name="weather-optional_v1", arguments='{"city":null,"date":"2026-07-20","unit":"k"}').json()
    assert inv["state"] == "VALIDATION_REJECTED"
    assert sorted((i["pointer"], i["keyword"]) for i in inv["error"]["detail"]["issues"]) == [("/city", "type"), ("/unit", "enum")]


def test_it_maps_nothing_for_a_call_that_did_not_see_a_strict_rendering(agent, optional_unit):
    call = _call(agent, "anthropic", ["weather.optional@1"])
    inv = agent.propose(call["id"], name="weather-optional_v1", arguments=ARGS_WITH_NULL).json()
    assert inv["state"] == "VALIDATION_REJECTED"
    assert [(i["pointer"], i["keyword"]) for i in inv["error"]["detail"]["issues"]] == [("/unit", "enum"), ("/unit", "type")]
    assert "strict_rendering" not in inv["validation"]
