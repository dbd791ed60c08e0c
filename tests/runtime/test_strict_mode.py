"""OpenAI strict mode: which schemas render strict, how they are made to fit, and the way back."""
from __future__ import annotations

import pytest

from toolops.runtime.strict_mode import MAX_DEPTH, null_to_absent, strict_form
from toolops.runtime.validation import compile_validator

OPTIONAL = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "where": {
            "type": "object",
            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}, "label": {"type": "string"}},
            "required": ["lat", "lon"],
        },
        "stops": {
            "type": "array",
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "note": {"type": "string"}},
                      "required": ["name"]},
        },
        "mode": {"$ref": "#/$defs/mode"},
    },
    "required": ["city"],
    "$defs": {"mode": {"type": "string", "enum": ["car", "train"]}},
}


def test_it_makes_optional_properties_required_and_nullable():
    form = strict_form(OPTIONAL)
    assert form.strict, form.reason
    params = form.parameters
    assert params["required"] == ["city", "unit", "days", "where", "stops", "mode"]
    assert params["additionalProperties"] is False
    assert params["properties"]["city"] == {"type": "string", "description": "City name"}
    assert params["properties"]["unit"] == {"type": ["string", "null"], "enum": ["c", "f", None]}  # default dropped
    assert params["properties"]["days"]["type"] == ["integer", "null"]
    assert params["properties"]["mode"] == {"anyOf": [{"$ref": "#/$defs/mode"}, {"type": "null"}]}
    where = params["properties"]["where"]
    assert where["type"] == ["object", "null"] and where["required"] == ["lat", "lon", "label"]
    assert sorted(form.null_as_absent) == sorted(
        ["/unit", "/days", "/where", "/where/label", "/stops", "/stops/*/note", "/mode"]
    )


def _every_object_is_closed(schema) -> bool:
    if isinstance(schema, dict):
        if "properties" in schema:
            if schema.get("additionalProperties") is not False or schema["required"] != list(schema["properties"]):
                return False
        return all(_every_object_is_closed(v) for v in schema.values())
    if isinstance(schema, list):
        return all(_every_object_is_closed(v) for v in schema)
    return True


def test_it_closes_every_object_and_requires_every_property():
    assert _every_object_is_closed(strict_form(OPTIONAL).parameters)


def test_it_maps_nulls_back_to_absent_so_the_original_schema_judges():
    form = strict_form(OPTIONAL)
    model_output = {
        "city": "Paris", "unit": None, "days": None, "where": {"lat": 1.0, "lon": 2.0, "label": None},
        "stops": [{"name": "a", "note": None}, {"name": "b", "note": "x"}], "mode": None,
    }
    strict_validator = compile_validator(form.parameters)
    assert strict_validator.validate(model_output) == []  # what strict decoding guarantees
    original = compile_validator(OPTIONAL)
    assert original.validate(model_output) != []  # null is not valid for the original schema
    mapped, removed = null_to_absent(model_output, form.null_as_absent)
    assert mapped == {"city": "Paris", "where": {"lat": 1.0, "lon": 2.0}, "stops": [{"name": "a"}, {"name": "b", "note": "x"}]}
    assert removed == ["/days", "/mode", "/stops/0/note", "/unit", "/where/label"]
    assert original.validate(mapped) == []
    assert model_output["where"]["label"] is None  # the input is not modified


def test_it_requires_an_optional_property_whose_default_is_null_without_mapping_it():
    schema = {"type": "object", "properties": {"color": {"type": ["string", "null"], "default": None}}}
    form = strict_form(schema)
    assert form.strict and form.null_as_absent == ()
    assert form.parameters["properties"]["color"] == {"type": ["string", "null"]}
    assert form.parameters["required"] == ["color"]
    assert compile_validator(schema).validate({"color": None}) == []


def test_it_leaves_required_nulls_for_validation_to_refuse():
    form = strict_form(OPTIONAL)
    mapped, removed = null_to_absent({"city": None}, form.null_as_absent)
    assert mapped == {"city": None} and removed == []
    assert compile_validator(OPTIONAL).validate(mapped) != []


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}},
         "keyword 'minLength' is not supported in strict mode at /properties/a"),
        ({"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}},
         "format 'uri' is not supported in strict mode at /properties/a"),
        ({"type": "object", "properties": {"a": {"type": "object"}}}, "object without declared properties (free-form) at /properties/a"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "array without items at /properties/a"),
        ({"type": "object", "properties": {"a": {"description": "anything"}}}, "schema without a type at /properties/a"),
        ({"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
         "optional property that already accepts null at /properties/a"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
         "object allows undeclared properties at /"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "anyOf": [{"required": ["a"]}]},
         "the root uses anyOf"),
        ({"type": "object", "properties": {"a": {"anyOf": [{"type": "object", "properties": {"b": {"type": "string"}}}]}},
          "required": ["a"]},
         "optional property inside anyOf or $defs at /properties/a/anyOf/0/properties/b"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "allOf": [{}]},
         "keyword 'allOf' is not supported in strict mode at /"),
        ({"type": "object", "properties": {}}, "object without declared properties (free-form) at /"),
    ],
)
def test_it_says_why_a_schema_stays_non_strict(schema, reason):
    form = strict_form(schema)
    assert not form.strict and form.parameters is None
    assert form.reason == reason
    assert form.metadata() == {"strict": False, "strict_reason": reason, "null_as_absent": []}


def test_it_refuses_nesting_beyond_the_limit():
    schema = leaf = {"type": "object", "properties": {}, "required": []}
    for _ in range(MAX_DEPTH + 1):
        inner = {"type": "object", "properties": {}, "required": []}
        leaf["properties"]["x"] = inner
        leaf["required"] = ["x"]
        leaf = inner
    leaf["properties"]["v"] = {"type": "string"}
    leaf["required"] = ["v"]
    form = strict_form(schema)
    assert not form.strict and "nested deeper" in form.reason
