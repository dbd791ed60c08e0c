"""ToolSpec lifecycle (docs/concepts/index.md): checked at publish, immutable once published, versioned, retired."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from rest_framework.test import APIClient

from specs_app.models import ToolSpec
from specs_app.services import (
    IMMUTABLE_FIELDS,
    toolspec_new_version,
    toolspec_publish,
    toolspec_retire,
    toolspec_save_draft,
)
from tests.builders import DIALECT, Agent, make_tenant, make_token, make_toolspec

pytestmark = pytest.mark.django_db

DRAFT_03 = "http://json-schema.org/draft-03/schema#"
DRAFT_04 = "http://json-schema.org/draft-04/schema#"
DRAFT_07 = "http://json-schema.org/draft-07/schema#"


def _schema(**extra) -> dict:
    return {
        "$schema": DIALECT,
        "type": "object",
        "properties": {"city": {"type": "string"}, "date": {"type": "string"}},
        "required": ["city", "date"],
        "additionalProperties": False,
        **extra,
    }


def _refused(spec: ToolSpec) -> str:
    """Publish ``spec``, expect a ValidationError, check it stayed a draft; return the message."""
    with pytest.raises(ValidationError) as info:
        toolspec_publish(spec=spec)
    spec.refresh_from_db()
    assert spec.status == ToolSpec.Status.DRAFT and spec.published_at is None
    return " ".join(info.value.messages)


def _agent() -> Agent:
    _, token = make_token()
    return Agent(APIClient(), token)


# --------------------------------------------------------------------------- publish-time checks


def test_it_refuses_an_unsupported_schema_keyword_dialect_at_publish():
    spec = make_toolspec(publish=False, schema=_schema(**{"$schema": DRAFT_03}))
    assert "unsupported_dialect" in _refused(spec)


def test_it_refuses_an_unsupported_declared_dialect_at_publish():
    schema = _schema()
    del schema["$schema"]
    spec = make_toolspec(publish=False, schema=schema, schema_dialect=DRAFT_04)
    assert "unsupported_dialect" in _refused(spec)


def test_it_never_offers_a_spec_refused_at_publish_to_a_model_call():
    """Refused at publish, so a call can never meet it: it is not in /tools and not registrable."""
    spec = make_toolspec(publish=False, schema=_schema(**{"$schema": DRAFT_03}))
    _refused(spec)
    agent = _agent()
    assert agent.get("/api/v1/tools").json()["name_map"] == {}
    run = agent.run()
    resp = agent.post(f"/api/v1/runs/{run['id']}/model-calls", {"tools": ["weather.get_forecast@1"]})
    assert resp.status_code == 400
    assert resp.json()["code"] == "unknown_tool"


@pytest.mark.parametrize(
    "schema",
    [
        _schema(properties={"city": {"type": "strng"}}),
        _schema(minProperties=-1),
        _schema(required="city"),
        _schema(properties={"city": {"pattern": "("}}),
    ],
    ids=["unknown-type", "negative-minProperties", "required-not-a-list", "bad-regex"],
)
def test_it_refuses_a_schema_invalid_for_its_dialect(schema):
    spec = make_toolspec(publish=False, schema=schema)
    assert "invalid_schema" in _refused(spec)


def test_it_refuses_a_format_it_cannot_assert_when_format_assertion_is_on():
    schema = _schema(properties={"city": {"type": "string"}, "date": {"type": "string", "format": "int32"}})
    spec = make_toolspec(publish=False, schema=schema, format_assertion=True)
    message = _refused(spec)
    assert "unsupported_format" in message and "'int32'" in message and "date-time" in message


def test_it_publishes_an_unknown_format_as_an_annotation_when_format_assertion_is_off():
    schema = _schema(properties={"city": {"type": "string"}, "date": {"type": "string", "format": "int32"}})
    spec = toolspec_publish(spec=make_toolspec(publish=False, schema=schema, format_assertion=False))
    assert spec.status == ToolSpec.Status.PUBLISHED


def test_it_publishes_an_asserted_known_format_and_an_ecma_pattern():
    schema = _schema(properties={
        "city": {"type": "string", "pattern": "^\\p{Letter}[\\p{Letter} \\-]*$"},
        "date": {"type": "string", "format": "date"},
    })
    spec = toolspec_publish(spec=make_toolspec(publish=False, schema=schema, format_assertion=True))
    assert spec.status == ToolSpec.Status.PUBLISHED


def test_it_refuses_a_ref_that_cannot_resolve_offline():
    spec = make_toolspec(publish=False, schema=_schema(properties={"city": {"$ref": "https://example.com/city.json"}}))
    assert "unresolvable_ref" in _refused(spec)


def test_it_refuses_a_schema_that_is_not_an_object_schema():
    spec = make_toolspec(publish=False, schema={"$schema": DIALECT, "type": "array"})
    assert "type" in _refused(spec)


@pytest.mark.parametrize(
    "normalizers",
    [
        [{"pointer": "/date", "normalizer": "no_such_normalizer"}],
        [{"pointer": "date", "normalizer": "date"}],
        [{"pointer": "/date", "normalizer": "date", "options": {"no_such_option": 1}}],
        [{"pointer": "/date", "normalizer": "date", "extra": 1}],
        {"pointer": "/date", "normalizer": "date"},
    ],
    ids=["unknown-normalizer", "bad-pointer", "unknown-option", "unknown-key", "not-a-list"],
)
def test_it_refuses_bad_normalizer_rules(normalizers):
    spec = make_toolspec(publish=False, normalizers=normalizers)
    assert "normalizers" in _refused(spec)


@pytest.mark.parametrize(
    "name",
    ["bad-name", "1weather.get", "weather..get", "weather.get ", "wéather.get", "a" * 62],
    ids=["dash", "leading-digit", "empty-segment", "trailing-space", "non-ascii", "model-facing-name-65-chars"],
)
def test_it_refuses_a_name_that_cannot_be_rendered(name):
    spec = make_toolspec(publish=False, name=name)
    _refused(spec)


def test_it_accepts_a_name_whose_model_facing_form_is_exactly_64_chars():
    spec = make_toolspec(publish=False, name="a" * 61)
    assert len(spec.model_facing_name) == 64
    assert toolspec_publish(spec=spec).status == ToolSpec.Status.PUBLISHED


def test_it_records_the_canonical_dialect_at_publish():
    schema = _schema()
    del schema["$schema"]
    spec = make_toolspec(publish=False, schema=schema, schema_dialect=DRAFT_07.rstrip("#"))
    assert toolspec_publish(spec=spec).schema_dialect == DRAFT_07


def test_it_lets_the_schemas_own_dialect_win_over_the_declared_one():
    spec = make_toolspec(publish=False, schema=_schema(), schema_dialect=DRAFT_07)
    assert toolspec_publish(spec=spec).schema_dialect == DIALECT


def test_it_refuses_to_publish_twice():
    spec = make_toolspec()
    with pytest.raises(ValidationError):
        toolspec_publish(spec=spec)


# --------------------------------------------------------------------------- immutability


def test_it_refuses_to_save_a_published_spec_as_a_draft():
    spec = make_toolspec()
    spec.title = "changed"
    with pytest.raises(ValidationError):
        toolspec_save_draft(spec=spec)
    spec.refresh_from_db()
    assert spec.title == ""


def test_it_saves_edits_to_a_draft():
    spec = make_toolspec(publish=False)
    spec.input_schema = _schema(properties={"city": {"type": "string"}, "date": {"type": "string"}, "days": {"type": "integer"}})
    toolspec_save_draft(spec=spec)
    spec.refresh_from_db()
    assert "days" in spec.input_schema["properties"]


CHANGES = {
    "input_schema": {"type": "object"},
    "title": "changed",
    "description": "changed",
    "schema_dialect": DRAFT_07,
    "format_assertion": True,
    "side_effect_class": "write_unsafe",
    "normalizers": [],
    "required_capabilities": [],
    "timeout_policy": {"deadline_seconds": 1},
    "retry_policy": {"maximum_attempts": 9},
    "confirmation_policy": {"required": True},
    "result_policy": {"max_bytes": 1},
    "executor": {"kind": "http", "url": "http://evil.invalid"},
    "idempotency_retention_seconds": 1,
    "expired_key_policy": "new_call",
    "name": "weather.renamed",
    "version": 7,
}


def test_it_covers_every_immutable_field_in_these_tests():
    assert set(CHANGES) == set(IMMUTABLE_FIELDS)


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_it_has_the_database_refuse_a_change_to_a_published_spec(field):
    spec = make_toolspec()
    before = getattr(spec, field)
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolSpec.objects.filter(pk=spec.pk).update(**{field: CHANGES[field]})
    spec.refresh_from_db()
    assert getattr(spec, field) == before


def test_it_has_the_database_refuse_a_change_of_published_at():
    spec = make_toolspec()
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolSpec.objects.filter(pk=spec.pk).update(published_at=None)


@pytest.mark.parametrize("move", ["global to a tenant", "to another tenant", "a tenant's to global"])
def test_it_has_the_database_refuse_moving_a_published_spec_to_another_owner(move):
    a, b = make_tenant(), make_tenant()
    owner, new_owner = {"global to a tenant": (None, a), "to another tenant": (a, b), "a tenant's to global": (a, None)}[move]
    spec = make_toolspec(publish=False)
    ToolSpec.objects.filter(pk=spec.pk).update(tenant=owner)
    toolspec_publish(spec=ToolSpec.objects.get(pk=spec.pk))
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolSpec.objects.filter(pk=spec.pk).update(tenant=new_owner)
    assert ToolSpec.objects.get(pk=spec.pk).tenant == owner


def test_it_lets_a_draft_change_its_owner():
    spec = make_toolspec(publish=False)
    tenant = make_tenant()
    ToolSpec.objects.filter(pk=spec.pk).update(tenant=tenant)
    assert ToolSpec.objects.get(pk=spec.pk).tenant == tenant


def test_it_has_the_database_refuse_a_change_to_a_retired_spec():
    spec = toolspec_retire(spec=make_toolspec())
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolSpec.objects.filter(pk=spec.pk).update(input_schema={"type": "object"})


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_it_lets_the_database_update_a_draft(field):
    spec = make_toolspec(publish=False)
    ToolSpec.objects.filter(pk=spec.pk).update(**{field: CHANGES[field]})
    spec.refresh_from_db()
    assert getattr(spec, field) == CHANGES[field]


@pytest.mark.parametrize("retire", [False, True], ids=["published", "retired"])
def test_it_never_lets_a_published_version_go_back_to_draft(retire):
    spec = make_toolspec()
    if retire:
        spec = toolspec_retire(spec=spec)
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolSpec.objects.filter(pk=spec.pk).update(status=ToolSpec.Status.DRAFT)
    spec.refresh_from_db()
    assert spec.status != ToolSpec.Status.DRAFT


def test_it_refuses_a_model_save_of_a_changed_published_spec():
    spec = make_toolspec()
    spec.input_schema = {"type": "object"}
    with pytest.raises(IntegrityError), transaction.atomic():
        spec.save()


# --------------------------------------------------------------------------- versions


def test_it_makes_a_new_version_as_a_draft_with_the_same_content():
    spec = make_toolspec(title="Weather", timeout_policy={"deadline_seconds": 30})
    draft = toolspec_new_version(spec=spec)
    assert (draft.name, draft.version, draft.status) == (spec.name, 2, ToolSpec.Status.DRAFT)
    assert draft.pk != spec.pk and draft.published_at is None
    for field in IMMUTABLE_FIELDS:
        if field != "version":
            assert getattr(draft, field) == getattr(spec, field), field


def test_it_makes_the_next_free_version_even_from_an_older_one():
    v1 = make_toolspec()
    make_toolspec(version=2)
    assert toolspec_new_version(spec=v1).version == 3


def test_it_publishes_the_new_version_beside_the_old_one():
    v1 = make_toolspec()
    draft = toolspec_new_version(spec=v1)
    draft.description = "v2 for tests"
    toolspec_save_draft(spec=draft)
    v2 = toolspec_publish(spec=draft)
    v1.refresh_from_db()
    assert (v1.status, v2.status) == (ToolSpec.Status.PUBLISHED, ToolSpec.Status.PUBLISHED)
    assert v1.description == "weather.get_forecast for tests"
    assert _agent().get("/api/v1/tools").json()["name_map"] == {
        "weather-get_forecast_v1": "weather.get_forecast@1",
        "weather-get_forecast_v2": "weather.get_forecast@2",
    }


def test_it_does_not_offer_a_draft_version():
    make_toolspec()
    toolspec_new_version(spec=ToolSpec.objects.get())
    assert list(_agent().get("/api/v1/tools").json()["name_map"].values()) == ["weather.get_forecast@1"]


# --------------------------------------------------------------------------- retirement


def test_it_retires_a_published_version():
    spec = toolspec_retire(spec=make_toolspec())
    assert spec.status == ToolSpec.Status.RETIRED and spec.retired_at is not None
    assert spec.published_at is not None


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "mcp"])
def test_it_does_not_offer_a_retired_version(fmt):
    v1, _v2 = make_toolspec(), make_toolspec(version=2)
    toolspec_retire(spec=v1)
    body = _agent().get("/api/v1/tools", format=fmt).json()
    assert body["name_map"] == {"weather-get_forecast_v2": "weather.get_forecast@2"}
    assert len(body["tools"]) == 1


def test_it_refuses_to_show_a_retired_version_to_a_new_model_call():
    toolspec_retire(spec=make_toolspec())
    agent = _agent()
    run = agent.run()
    resp = agent.post(f"/api/v1/runs/{run['id']}/model-calls", {"tools": ["weather.get_forecast@1"]})
    assert resp.status_code == 400 and resp.json()["code"] == "unknown_tool"
    assert agent.model_call(run["id"])["name_map"] == {}


def test_it_does_not_retire_a_draft():
    spec = toolspec_retire(spec=make_toolspec(publish=False))
    assert spec.status == ToolSpec.Status.DRAFT and spec.retired_at is None
