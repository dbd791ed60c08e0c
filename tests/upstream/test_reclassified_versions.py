"""A new version whose annotations propose another class does not inherit the old class's grants.

An imported tool's capability carries an operation class (read, create, delete). When the
upstream's annotations change (a read tool now says it is destructive), the new version made
from the changed definition must require a capability of the new class: a grant an admin gave
for reading must not authorize deleting. Real parts: the demo notes MCP server in its own
process, the database; proposals through the REST API in-process (decided at admission).
"""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from specs_app.models import Capability, UpstreamTool
from worker.upstream_sync import imported_capability, upstream_import, upstream_new_version, upstream_refresh
from tests.builders import make_grant

from tests.upstream.conftest import SECRET_REF, published
from tests.upstream.test_import_and_quarantine import _agent_with_grants, _propose

pytestmark = pytest.mark.django_db


def _changed_search(notes, **change):
    specs = published(upstream_import(url=notes.url, prefix="team", credential=SECRET_REF).created)
    notes.redefine("notes.search", **change)
    upstream_refresh()
    return specs, UpstreamTool.objects.get(tool_spec=specs["notes.search"])


def test_a_version_that_turned_destructive_requires_a_capability_of_its_new_class(notes):
    specs, watch = _changed_search(notes, annotations={"readOnlyHint": False, "destructiveHint": True})
    v1 = specs["notes.search"]
    subject, agent = _agent_with_grants({"notes.search": v1})  # v1's read capability, pinned to v1
    make_grant(capability=v1.required_capabilities[0]["capability"], subject=subject)  # and one for any version
    draft = upstream_new_version(upstream=watch)
    assert draft.side_effect_class == "write_unsafe"
    assert draft.required_capabilities == [{"capability": "team.notes.search:delete"}]
    assert Capability.objects.get(name="team.notes.search:delete").operation_class == "delete"
    assert Capability.objects.get(name="team.notes.search").operation_class == "read"  # v1's, unchanged
    (v2,) = published([draft]).values()
    inv = _propose(agent, v2.ref, {"query": "x"})
    assert inv["state"] == "AUTHORIZATION_REJECTED", inv
    assert "team.notes.search:delete" in str(inv["error"]), inv["error"]  # the capability nobody was granted
    assert notes.calls() == []


def test_a_version_of_the_same_class_keeps_its_capability_and_grants(notes):
    specs, watch = _changed_search(notes, description="Search notes, now with ranking.")
    v1 = specs["notes.search"]
    subject, agent = _agent_with_grants({})
    make_grant(capability=v1.required_capabilities[0]["capability"], subject=subject)  # any version of the tool
    draft = upstream_new_version(upstream=watch)
    assert draft.required_capabilities == v1.required_capabilities == [{"capability": "team.notes.search"}]
    (v2,) = published([draft]).values()
    inv = _propose(agent, v2.ref, {"query": "x"})
    assert inv["state"] != "AUTHORIZATION_REJECTED", inv


def test_a_capability_an_admin_added_by_hand_is_kept_on_the_new_version(notes):
    specs = upstream_import(url=notes.url, prefix="team", credential=SECRET_REF).created
    search = next(s for s in specs if s.upstream.upstream_name == "notes.search")
    extra = {"capability": "notes.audited"}
    search.required_capabilities = [*search.required_capabilities, extra]
    search.save()
    (v1,) = published([search]).values()
    notes.redefine("notes.search", annotations={"readOnlyHint": False, "destructiveHint": False})
    upstream_refresh()
    draft = upstream_new_version(upstream=UpstreamTool.objects.get(tool_spec=v1))
    assert draft.required_capabilities == [{"capability": "team.notes.search:create"}, extra]


def test_a_capability_made_by_hand_under_the_class_name_with_another_class_is_refused(db):
    Capability.objects.create(name="team.thing", operation_class="read")
    Capability.objects.create(name="team.thing:delete", operation_class="read")
    with pytest.raises(ValidationError, match="exists with the class read"):
        imported_capability(name="team.thing", operation_class="delete", description="x")
    assert imported_capability(name="team.thing", operation_class="read", description="x").name == "team.thing"


def test_a_name_too_long_for_its_capability_is_skipped_at_import_with_the_reason(notes):
    prefix = "p" * 12
    # "pppppppppppp.ttt…" fits a ToolSpec name (200) and the capability name (120), but not "…:delete".
    long_tool = "t" * (Capability._meta.get_field("name").max_length - len(prefix) - 1)
    notes.redefine(long_tool, description="a tool with a long name")  # the demo lists a new tool
    report = upstream_import(url=notes.url, prefix=prefix, credential=SECRET_REF)
    assert long_tool not in [s.upstream.upstream_name for s in report.created]
    assert "is longer than" in report.skipped[long_tool]
    assert not Capability.objects.filter(name__startswith=f"{prefix}.{long_tool[:20]}").exists()


def test_a_class_capability_too_long_to_store_is_a_clear_refusal_not_a_database_error(db):
    name = "t" * Capability._meta.get_field("name").max_length  # imported before names were checked for ":class"
    Capability.objects.create(name=name, operation_class="read")
    with pytest.raises(ValidationError, match="too long"):
        imported_capability(name=name, operation_class="delete", description="x")
    assert not Capability.objects.filter(operation_class="delete").exists()


def test_the_imported_capability_listed_twice_by_hand_becomes_one(notes):
    specs = upstream_import(url=notes.url, prefix="team", credential=SECRET_REF).created
    search = next(s for s in specs if s.upstream.upstream_name == "notes.search")
    search.required_capabilities = [{"capability": "team.notes.search"}, {"capability": "team.notes.search:delete"}]
    search.save()
    (v1,) = published([search]).values()
    notes.redefine("notes.search", annotations={"readOnlyHint": False, "destructiveHint": True})
    upstream_refresh()
    draft = upstream_new_version(upstream=UpstreamTool.objects.get(tool_spec=v1))
    assert draft.required_capabilities == [{"capability": "team.notes.search:delete"}]
