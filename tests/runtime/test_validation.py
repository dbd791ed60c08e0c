"""Structural validation (docs/concepts/admission.md layer 2): publish-time refusals and call-time issues."""
from __future__ import annotations

import socket
import timeit
from importlib.metadata import version

import pytest

from toolops.runtime import validation
from toolops.runtime.validation import (
    DIALECT_2020_12,
    OFFLINE_REGISTRY,
    SUPPORTED_DIALECTS,
    SchemaRefused,
    ValidationIssue,
    cached_validator,
    check_schema,
    compile_validator,
    offline_registry_with,
    resolve_dialect,
)

EVENT_SCHEMA = {
    "$schema": DIALECT_2020_12,
    "type": "object",
    "properties": {
        "calendar_id": {"type": "string"},
        "title": {"type": "string", "maxLength": 10},
        "date": {"type": "string", "format": "date"},
        "duration_minutes": {"type": "integer", "minimum": 1},
    },
    "required": ["calendar_id", "title", "date"],
    "additionalProperties": False,
}


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test loudly."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise AssertionError(f"network access attempted: {args!r}")

    # Name lookup comes first on the way out, so patch it as well as connecting.
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def test_it_notices_network_access_when_it_happens(no_network):
    """Guard for the guard: stock jsonschema's default registry does fetch remote refs."""
    import jsonschema

    with pytest.raises(Exception):  # noqa: B017 - whatever jsonschema wraps it in
        jsonschema.Draft202012Validator({"$ref": "http://example.com/a.json"}).validate(1)
    assert no_network


class TestPublishTime:
    def test_it_refuses_an_unsupported_schema_dialect(self):
        for uri in ("http://json-schema.org/draft-04/schema#", "https://example.com/my-meta"):
            with pytest.raises(SchemaRefused) as caught:
                check_schema({"$schema": uri, "type": "object"})
            assert caught.value.reason == "unsupported_dialect"
            assert caught.value.code == "schema_refused"

    def test_it_refuses_an_unsupported_declared_dialect(self):
        with pytest.raises(SchemaRefused) as caught:
            check_schema({"type": "object"}, "http://json-schema.org/draft-04/schema#")
        assert caught.value.reason == "unsupported_dialect"

    def test_it_refuses_a_schema_invalid_against_its_meta_schema(self):
        for bad in ({"type": "objekt"}, {"required": "date"}, {"pattern": "["}, {"minimum": "1"}):
            with pytest.raises(SchemaRefused) as caught:
                check_schema(bad)
            assert caught.value.reason == "invalid_schema", bad

    def test_it_refuses_a_remote_ref_without_opening_a_socket(self, no_network):
        schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}
        with pytest.raises(SchemaRefused) as caught:
            check_schema(schema)
        assert caught.value.reason == "unresolvable_ref"
        assert "https://example.com/a.json" in caught.value.message
        assert no_network == []

    def test_it_refuses_a_dangling_local_ref(self):
        with pytest.raises(SchemaRefused) as caught:
            check_schema({"$ref": "#/$defs/missing"})
        assert caught.value.reason == "unresolvable_ref"

    def test_it_refuses_a_ref_that_dangles_inside_a_registered_document(self, no_network):
        registry = offline_registry_with(
            {"urn:example:a": {"$ref": "https://example.com/elsewhere.json"}}
        )
        with pytest.raises(SchemaRefused) as caught:
            check_schema({"$ref": "urn:example:a"}, registry=registry)
        assert caught.value.reason == "unresolvable_ref"
        assert no_network == []

    def test_it_resolves_local_registered_and_meta_schema_refs_offline(self, no_network):
        registry = offline_registry_with({"urn:example:int": {"type": "integer"}})
        schema = {
            "$id": "https://tools.example/event",
            "$defs": {"n": {"$id": "parts/n", "$ref": "m"}, "m": {"$id": "parts/m"}},
            "properties": {
                "a": {"$ref": "#/$defs/n"},
                "b": {"$ref": "urn:example:int"},
                "c": {"$ref": "https://json-schema.org/draft/2020-12/meta/core"},
            },
        }
        assert check_schema(schema, registry=registry) == DIALECT_2020_12
        assert compile_validator(schema, registry=registry).validate({"b": "x"})[0].pointer == "/b"
        assert no_network == []

    def test_it_accepts_a_supported_schema_and_returns_its_dialect(self):
        assert check_schema(EVENT_SCHEMA) == DIALECT_2020_12
        draft7 = {"$schema": "http://json-schema.org/draft-07/schema", "type": "object"}
        assert check_schema(draft7) == "http://json-schema.org/draft-07/schema#"


class TestDialects:
    def test_it_supports_three_dialects_with_and_without_empty_fragment(self):
        for uri in (
            "https://json-schema.org/draft/2020-12/schema",
            "https://json-schema.org/draft/2019-09/schema",
            "http://json-schema.org/draft-07/schema",
        ):
            assert SUPPORTED_DIALECTS[uri] is SUPPORTED_DIALECTS[uri + "#"]

    def test_it_prefers_the_schemas_own_dialect_then_the_declared_one(self):
        draft7 = "http://json-schema.org/draft-07/schema#"
        assert resolve_dialect({}, None) == DIALECT_2020_12
        assert resolve_dialect({}, draft7.rstrip("#")) == draft7
        assert resolve_dialect({"$schema": DIALECT_2020_12 + "#"}, draft7) == DIALECT_2020_12

    def test_it_follows_a_custom_meta_schema_only_when_it_is_available_offline(self):
        custom = "https://tools.example/meta"
        schema = {"$schema": custom, "type": "object"}
        with pytest.raises(SchemaRefused):
            resolve_dialect(schema, None)
        registry = offline_registry_with({custom: {"$schema": DIALECT_2020_12}})
        assert resolve_dialect(schema, None, registry=registry) == DIALECT_2020_12


class TestCallTime:
    def test_it_reports_an_extra_field_as_additional_properties_at_the_root(self):
        validator = compile_validator(EVENT_SCHEMA)
        issues = validator.validate(
            {"calendar_id": "primary", "title": "Passport", "date": "2026-07-20", "role": "admin"}
        )
        assert [(i.pointer, i.keyword) for i in issues] == [("", "additionalProperties")]
        assert issues[0].schema_pointer == "/additionalProperties"
        assert "role" in issues[0].message

    def test_it_reports_every_error_sorted_by_pointer_and_keyword(self):
        issues = compile_validator(EVENT_SCHEMA).validate(
            {"title": "far too long a title", "date": 20260720, "duration_minutes": 0, "x": 1}
        )
        assert [(i.pointer, i.keyword) for i in issues] == [
            ("", "additionalProperties"),
            ("", "required"),
            ("/date", "type"),
            ("/duration_minutes", "minimum"),
            ("/title", "maxLength"),
        ]
        assert issues[3].schema_pointer == "/properties/duration_minutes/minimum"

    def test_it_explains_an_any_of_failure_by_its_closest_branch(self):
        schema = {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 3}]}
        issues = compile_validator(schema).validate(1)
        assert [(i.pointer, i.keyword, i.schema_pointer) for i in issues] == [
            ("", "anyOf", "/anyOf"),
            ("", "minimum", "/anyOf/1/minimum"),
        ]

    def test_it_escapes_instance_pointers_per_rfc_6901(self):
        schema = {"properties": {"a/b~c": {"type": "integer"}}}
        assert compile_validator(schema).validate({"a/b~c": "x"})[0].pointer == "/a~1b~0c"

    def test_it_treats_format_as_annotation_unless_asserted(self):
        bad_date = {"calendar_id": "primary", "title": "Passport", "date": "tomorrow"}
        assert compile_validator(EVENT_SCHEMA).validate(bad_date) == []
        asserted = compile_validator(EVENT_SCHEMA, format_assertion=True)
        issues = asserted.validate(bad_date)
        assert [(i.pointer, i.keyword) for i in issues] == [("/date", "format")]
        assert asserted.validate({**bad_date, "date": "2026-07-20"}) == []

    def test_it_serialises_an_issue(self):
        issue = ValidationIssue(pointer="/date", keyword="format", message="m", schema_pointer="/p")
        assert issue.as_dict() == {
            "pointer": "/date", "keyword": "format", "message": "m", "schema_pointer": "/p"
        }

    def test_it_records_validator_version_dialect_and_format_setting(self):
        record = compile_validator(EVENT_SCHEMA, format_assertion=True).record()
        assert record == {
            "validator": "jsonschema",
            "validator_version": version("jsonschema"),
            "dialect": DIALECT_2020_12,
            "format_assertion": True,
            "pattern_engine": f"ECMA-262 via regex {version('regex')}",
            "format_checkers": "toolops.runtime.formats",
        }
        draft7 = compile_validator(
            {"type": "object"}, dialect="http://json-schema.org/draft-07/schema"
        )
        assert draft7.record()["dialect"] == "http://json-schema.org/draft-07/schema#"
        assert draft7.record()["format_assertion"] is False

    def test_it_never_fetches_while_validating(self, no_network):
        validator = compile_validator({"$ref": "https://json-schema.org/draft/2020-12/schema"})
        assert validator.validate({"type": "object"}) == []
        assert validator.validate({"type": 12}) != []
        assert no_network == []


class TestCache:
    @pytest.fixture(autouse=True)
    def _fresh_cache(self):
        validation.clear_validator_cache()
        yield
        validation.clear_validator_cache()

    def test_it_returns_the_identical_validator_for_the_same_key(self, monkeypatch):
        compiled = []
        real = validation.compile_validator
        monkeypatch.setattr(
            validation, "compile_validator", lambda *a, **k: compiled.append(1) or real(*a, **k)
        )
        first = cached_validator(("calendar.create_event", 1), EVENT_SCHEMA)
        assert cached_validator(("calendar.create_event", 1), EVENT_SCHEMA) is first
        assert cached_validator(("calendar.create_event", 2), EVENT_SCHEMA) is not first
        asserted = cached_validator(
            ("calendar.create_event", 1), EVENT_SCHEMA, format_assertion=True
        )
        assert asserted is not first and asserted.format_assertion
        assert len(compiled) == 3

    def test_it_evicts_the_least_recently_used_entry(self, monkeypatch):
        monkeypatch.setattr(validation, "VALIDATOR_CACHE_SIZE", 2)
        a = cached_validator(("a", 1), {})
        cached_validator(("b", 1), {})
        assert cached_validator(("a", 1), {}) is a  # touch a: b is now the oldest
        cached_validator(("c", 1), {})
        assert cached_validator(("a", 1), {}) is a
        assert len(validation._cache) == 2 and (("b", 1), None, False) not in validation._cache

    def test_it_serves_a_hit_without_recompiling(self):
        cached_validator(("calendar.create_event", 1), EVENT_SCHEMA)
        compile_cost = min(
            timeit.repeat(lambda: compile_validator(EVENT_SCHEMA), number=20, repeat=3)
        )
        hit_cost = min(
            timeit.repeat(
                lambda: cached_validator(("calendar.create_event", 1), EVENT_SCHEMA),
                number=20,
                repeat=3,
            )
        )
        # A hit is a dict lookup; it must be far cheaper than compiling (generous margin for CI).
        assert hit_cost * 5 < compile_cost


def test_it_preloads_the_official_meta_schemas():
    for uri in (
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/meta/core",
        "https://json-schema.org/draft/2019-09/schema",
        "http://json-schema.org/draft-07/schema",
    ):
        assert OFFLINE_REGISTRY.get_or_retrieve(uri).value.contents
