"""Tool definitions per ecosystem and the exact model-facing name <-> name@version mapping."""
from __future__ import annotations

import copy
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolops.model_io.rendering import (
    FORMATS,
    TOOL_NAME_RE,
    RenderableTool,
    ToolNameError,
    model_facing_name,
    parse_model_facing_name,
    parse_tool_ref,
    render_tool,
    render_tools,
    rendering_metadata,
    tool_ref,
    validate_tool_name,
)

# The ecosystems' own limits, written out independently of the module under test.
OPENAI_ANTHROPIC_NAME = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")
MCP_NAME = re.compile(r"\A[A-Za-z0-9_.-]{1,128}\Z")

names = st.from_regex(TOOL_NAME_RE, fullmatch=True).filter(lambda s: len(s) <= 40)
versions = st.integers(min_value=1, max_value=10**6)
# Text biased towards the characters the grammar cares about, so near-misses get generated.
near_text = st.text(alphabet="aZ9_.-@v01 \n", max_size=20) | st.text(max_size=20)

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "calendar_id": {"type": "string"},
        "start": {"type": "string", "format": "date-time"},
    },
    "required": ["calendar_id", "start"],
    "additionalProperties": False,
}


def make_tool(**overrides) -> RenderableTool:
    fields = dict(
        name="calendar.create_event",
        version=1,
        description="Create an event in a calendar.",
        input_schema=copy.deepcopy(SCHEMA),
        side_effect_class="write_idempotent",
    )
    fields.update(overrides)
    return RenderableTool(**fields)


# --- mapping ------------------------------------------------------------------------------


def test_it_renders_the_documented_examples():
    assert tool_ref("calendar.create_event", 1) == "calendar.create_event@1"
    assert model_facing_name("calendar.create_event", 1) == "calendar-create_event_v1"
    assert parse_tool_ref("calendar.create_event@1") == ("calendar.create_event", 1)
    assert parse_model_facing_name("calendar-create_event_v1") == ("calendar.create_event", 1)


@given(names, versions)
def test_it_round_trips_tool_refs(name, version):
    assert parse_tool_ref(tool_ref(name, version)) == (name, version)


@given(names, versions)
def test_it_round_trips_model_facing_names_valid_in_every_ecosystem(name, version):
    mf = model_facing_name(name, version)
    assert OPENAI_ANTHROPIC_NAME.match(mf)
    assert MCP_NAME.match(mf)
    assert parse_model_facing_name(mf) == (name, version)


@given(names, versions, names, versions)
def test_it_never_maps_two_tools_to_one_name(name_a, version_a, name_b, version_b):
    if (name_a, version_a) != (name_b, version_b):
        assert model_facing_name(name_a, version_a) != model_facing_name(name_b, version_b)
        assert tool_ref(name_a, version_a) != tool_ref(name_b, version_b)


@given(near_text)
def test_it_accepts_only_model_facing_names_it_would_render(text):
    try:
        name, version = parse_model_facing_name(text)
    except ToolNameError:
        return
    assert model_facing_name(name, version) == text


@given(near_text)
def test_it_accepts_only_tool_refs_it_would_render(text):
    try:
        name, version = parse_tool_ref(text)
    except ToolNameError:
        return
    assert tool_ref(name, version) == text


@pytest.mark.parametrize(
    "name, version, mf",
    [
        ("a_v1.b", 3, "a_v1-b_v3"),  # "_v" inside the name: only the last one is the suffix
        ("a_v", 1, "a_v_v1"),
        ("a_", 1, "a__v1"),
        ("x", 10**6, "x_v1000000"),
    ],
)
def test_it_splits_on_the_last_version_marker(name, version, mf):
    assert model_facing_name(name, version) == mf
    assert parse_model_facing_name(mf) == (name, version)


@pytest.mark.parametrize(
    "ref",
    ["x@0", "x@01", "x", "x@1@2", "x@", "@1", "x@-1", "x@+1", "x@1_0", "x@ 1", "x@1\n",
     "x@\u0661", "x.@1", ".x@1", "x..y@1", "x-y@1", "1x@1", "X@1.0", "", "x@1e3"],
)
def test_it_rejects_malformed_tool_refs(ref):
    with pytest.raises(ToolNameError) as info:
        parse_tool_ref(ref)
    assert info.value.code == "invalid_tool_name"


@pytest.mark.parametrize(
    "mf",
    [
        "calendar-create_event_v01",  # leading zero
        "calendar-create_event_v0",
        "calendar-create_event_v",
        "calendar-create_event",  # no version
        "calendar.create_event_v1",  # MCP would allow ".", but we never render it
        "calendar-create_event_v1\n",
        " calendar-create_event_v1",
        "calendar-create_event_V1",
        "calendar--create_event_v1",
        "-calendar_v1",
        "calendar-_v1",
        "calendar-create_event_v1_",
        "calendar-create_event_v+1",
        "calendar-create_event_v\u0661",
        "calendar.create_event@1",  # a tool_ref is not a model-facing name
        "",
        "_v1",
    ],
)
def test_it_rejects_malformed_model_facing_names(mf):
    with pytest.raises(ToolNameError):
        parse_model_facing_name(mf)


def test_it_maps_near_names_to_other_tools_never_to_the_close_one():
    # Each of these is well-formed, so it parses — but to a *different* tool; lookup then
    # reports unknown_tool instead of silently picking calendar.create_event@1.
    assert parse_model_facing_name("calendar-create-event_v1") == ("calendar.create.event", 1)
    assert parse_model_facing_name("Calendar-create_event_v1") == ("Calendar.create_event", 1)
    assert parse_model_facing_name("calendar-create_event_v2") == ("calendar.create_event", 2)
    assert parse_tool_ref("Calendar.create_event@1") != ("calendar.create_event", 1)


@pytest.mark.parametrize("name", ["calendar-create", "a@b", "a..b", ".a", "a.", "_a", "1a",
                                  "a b", "caf\u00e9", "a\n", "", "a.1b"])
def test_it_rejects_names_outside_the_grammar(name):
    with pytest.raises(ToolNameError):
        validate_tool_name(name)
    with pytest.raises(ToolNameError):
        tool_ref(name, 1)
    with pytest.raises(ToolNameError):
        model_facing_name(name, 1)


@pytest.mark.parametrize("version", [0, -1, True, 1.0, "1", None])
def test_it_rejects_versions_that_are_not_positive_ints(version):
    with pytest.raises(ToolNameError):
        tool_ref("x", version)
    with pytest.raises(ToolNameError):
        model_facing_name("x", version)


def test_it_rejects_non_string_inputs():
    for bad in (None, 1, b"x@1"):
        with pytest.raises(ToolNameError):
            parse_tool_ref(bad)
        with pytest.raises(ToolNameError):
            parse_model_facing_name(bad)
        with pytest.raises(ToolNameError):
            validate_tool_name(bad)


def test_it_refuses_names_whose_model_facing_form_exceeds_64_chars():
    fits = "a" * 61  # + "_v1" = 64
    assert len(model_facing_name(fits, 1)) == 64
    with pytest.raises(ToolNameError):
        model_facing_name("a" * 62, 1)
    with pytest.raises(ToolNameError):
        model_facing_name(fits, 10)  # the version counts too
    with pytest.raises(ToolNameError):
        parse_model_facing_name("a" * 62 + "_v1")
    with pytest.raises(ToolNameError):
        make_tool(name="a" * 62)
    # name@version itself has no such limit; only what the model sees does.
    assert parse_tool_ref("a" * 62 + "@1") == ("a" * 62, 1)


# --- renderings ---------------------------------------------------------------------------


def test_it_renders_openai_function_definitions():
    tool = make_tool()
    rendered = render_tool(tool, "openai")
    expected_parameters = {k: v for k, v in SCHEMA.items() if k != "$schema"}
    # Every property required, additionalProperties false, supported keywords: strict as is.
    assert rendered == {
        "type": "function",
        "function": {
            "name": "calendar-create_event_v1",
            "description": "Create an event in a calendar.",
            "parameters": expected_parameters,
            "strict": True,
        },
    }
    assert rendering_metadata(tool, "openai") == {"strict": True, "strict_reason": None, "null_as_absent": []}
    assert rendering_metadata(tool, "anthropic") == {}


def test_it_renders_openai_non_strict_with_the_reason_when_the_schema_does_not_fit():
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "calendar_id": {"type": "string", "minLength": 1}}}
    tool = make_tool(input_schema=schema)
    rendered = render_tool(tool, "openai")
    assert rendered["function"]["strict"] is False
    assert rendered["function"]["parameters"] == {k: v for k, v in schema.items() if k != "$schema"}
    meta = rendering_metadata(tool, "openai")
    assert meta["strict"] is False
    assert meta["strict_reason"] == "keyword 'minLength' is not supported in strict mode at /properties/calendar_id"


def test_it_renders_anthropic_tool_definitions():
    rendered = render_tool(make_tool(), "anthropic")
    assert rendered == {
        "name": "calendar-create_event_v1",
        "description": "Create an event in a calendar.",
        "input_schema": SCHEMA,
    }
    assert rendered["input_schema"]["type"] == "object"


def test_it_renders_mcp_tools_with_ref_as_default_title():
    rendered = render_tool(make_tool(), "mcp")
    assert rendered == {
        "name": "calendar-create_event_v1",
        "title": "calendar.create_event@1",
        "description": "Create an event in a calendar.",
        "inputSchema": SCHEMA,
        "annotations": {
            "title": "calendar.create_event@1",
            "readOnlyHint": False,
            "destructiveHint": False,
            "idempotentHint": True,
            "openWorldHint": True,
        },
    }
    titled = render_tool(make_tool(title="Create calendar event"), "mcp")
    assert titled["title"] == titled["annotations"]["title"] == "Create calendar event"


@pytest.mark.parametrize(
    "side_effect_class, read_only, destructive, idempotent",
    [
        ("read_only", True, False, True),
        ("write_idempotent", False, False, True),
        ("write_unsafe", False, True, False),
    ],
)
def test_it_derives_mcp_annotations_from_the_side_effect_class(
    side_effect_class, read_only, destructive, idempotent
):
    annotations = render_tool(make_tool(side_effect_class=side_effect_class), "mcp")["annotations"]
    assert annotations["readOnlyHint"] is read_only
    assert annotations["destructiveHint"] is destructive
    assert annotations["idempotentHint"] is idempotent
    assert annotations["openWorldHint"] is True


@pytest.mark.parametrize("fmt", FORMATS)
def test_it_keeps_the_description_verbatim(fmt):
    description = "  Überweisung — \"exact\" text\nwith a newline, no side-effect note  "
    rendered = render_tool(make_tool(description=description), fmt)
    body = rendered["function"] if fmt == "openai" else rendered
    assert body["description"] == description


@pytest.mark.parametrize("fmt", FORMATS)
def test_it_does_not_share_schema_objects_with_the_tool(fmt):
    tool = make_tool()
    before = copy.deepcopy(tool.input_schema)
    rendered = render_tool(tool, fmt)
    schema = {"openai": lambda r: r["function"]["parameters"],
              "anthropic": lambda r: r["input_schema"],
              "mcp": lambda r: r["inputSchema"]}[fmt](rendered)
    schema["properties"]["calendar_id"]["type"] = "integer"
    schema["extra"] = 1
    assert tool.input_schema == before


def test_it_drops_only_the_top_level_schema_keyword_for_openai():
    nested = {
        "type": "object",
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": {"d": {"$schema": "kept-when-nested", "type": "string"}},
        "properties": {"d": {"$ref": "#/$defs/d"}},
    }
    parameters = render_tool(make_tool(input_schema=nested), "openai")["function"]["parameters"]
    assert "$schema" not in parameters
    assert parameters["$defs"]["d"]["$schema"] == "kept-when-nested"
    assert parameters["properties"] == nested["properties"]
    # The other formats keep the schema exactly.
    assert render_tool(make_tool(input_schema=nested), "anthropic")["input_schema"] == nested


@pytest.mark.parametrize("fmt", FORMATS)
def test_it_emits_names_that_parse_back_in_every_format(fmt):
    tool = make_tool(name="weather.get_forecast", version=7, side_effect_class="read_only")
    rendered = render_tool(tool, fmt)
    name = rendered["function"]["name"] if fmt == "openai" else rendered["name"]
    assert parse_model_facing_name(name) == ("weather.get_forecast", 7)


def test_it_rejects_unknown_formats_listing_the_allowed_ones():
    with pytest.raises(ValueError) as info:
        render_tool(make_tool(), "gemini")
    assert "openai, anthropic, mcp" in str(info.value)
    with pytest.raises(ValueError):
        render_tools([make_tool()], "OpenAI")  # formats are exact, not case-folded


def test_it_rejects_unknown_side_effect_classes():
    with pytest.raises(ValueError, match="side_effect_class"):
        make_tool(side_effect_class="read-only")


@pytest.mark.parametrize("schema", [{}, {"type": "array"}, {"type": ["object", "null"]}, []])
def test_it_rejects_input_schemas_that_are_not_object_schemas(schema):
    with pytest.raises(ValueError, match="input_schema"):
        make_tool(input_schema=schema)


def test_it_rejects_invalid_tool_names_at_construction():
    with pytest.raises(ToolNameError):
        make_tool(name="calendar-create_event")
    with pytest.raises(ToolNameError):
        make_tool(version=0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_it_renders_lists_in_the_given_order(fmt):
    tools = [
        make_tool(name="web.fetch", side_effect_class="read_only"),
        make_tool(name="calendar.create_event"),
        make_tool(name="calendar.create_event", version=2),
        make_tool(name="payments.transfer", side_effect_class="write_unsafe"),
    ]
    rendered = render_tools(iter(tools), fmt)
    assert rendered == [render_tool(t, fmt) for t in tools]
    names = [r["function"]["name"] if fmt == "openai" else r["name"] for r in rendered]
    assert names == [
        "web-fetch_v1",
        "calendar-create_event_v1",
        "calendar-create_event_v2",
        "payments-transfer_v1",
    ]
    assert render_tools([], fmt) == []


def test_it_rejects_a_tool_listed_twice():
    with pytest.raises(ValueError, match="twice"):
        render_tools([make_tool(), make_tool(description="other")], "anthropic")
