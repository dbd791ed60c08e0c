"""BFCL function definitions as ToolSpec input schemas, checked against BFCL's ground truth.

Every BFCL function must convert to a schema that passes ``check_schema``; every ground-truth
call (first acceptable value per parameter) must validate against the converted schema of the
function it names, except the ids in ``KNOWN_BAD``, which must fail with exactly the listed
``pointer:keyword`` issues. Mutated calls (required parameter dropped, undeclared parameter
added, wrong JSON type) must be rejected.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from tests.conftest import CORPORA, require_corpus
from toolops.model_io.bfcl import (
    BFCLConversionError,
    bfcl_function_to_spec,
    bfcl_ground_truth_call,
)
from toolops.runtime.strict_mode import null_to_absent, strict_form
from toolops.runtime.validation import DIALECT_2020_12, check_schema, compile_validator

CORPUS = "bfcl"

UNDECLARED = "ground truth uses a parameter the function does not declare (SOURCE.md)"
MISSING_REQUIRED = "a required parameter is missing from the ground truth (SOURCE.md)"
OMITTABLE_REQUIRED = (
    "required parameter whose first acceptable value is '' (omit) (SOURCE.md; the other ids "
    "listed there pass, as a real value comes first)"
)
NO_VALUE = "ground truth lists no acceptable value ([]) for a required array parameter"
OUTSIDE_ENUM = "ground truth value is not in the parameter's declared enum"
STRING_ENUM = "declared as a string enum ('True', '2') but the ground truth is a bool/int"
SOURCE_TEXT = (
    "Java/JavaScript/Python ground truth passes source text (an identifier, constant or "
    "expression) as a string where the declared type is an array, map or number"
)
ITEM_TYPE = "declared integer items, but the ground truth lists strings"

# id -> (why, exact "pointer:keyword" issues the ground truth call produces)
KNOWN_BAD: dict[str, tuple[str, frozenset[str]]] = {
    **{
        id_: (UNDECLARED, frozenset({":additionalProperties"}))
        for id_ in ("live_multiple_862-181-3", "parallel_multiple_26")
    },
    # parallel_multiple_12 (undeclared `permeability`) is not here: its first value is "".
    "live_multiple_964-207-0": (
        f"{UNDECLARED}; {MISSING_REQUIRED}",
        frozenset({":additionalProperties", ":required"}),
    ),
    **{
        id_: (OMITTABLE_REQUIRED, frozenset({":required"}))
        for id_ in (
            "live_multiple_144-56-0",
            "live_multiple_507-149-4",
            "live_multiple_834-178-9",
            "simple_python_200",
        )
    },
    "live_simple_106-63-0": (NO_VALUE, frozenset({":required"})),
    "live_simple_112-68-0": (NO_VALUE, frozenset({":required"})),
    "live_multiple_87-38-4": (OUTSIDE_ENUM, frozenset({"/type:enum"})),
    "live_multiple_750-169-5": (OUTSIDE_ENUM, frozenset({"/genre:enum"})),
    "live_multiple_756-169-11": (OUTSIDE_ENUM, frozenset({"/genre:enum"})),
    "live_multiple_835-178-10": (OUTSIDE_ENUM, frozenset({"/genre:enum"})),
    "live_multiple_871-182-8": (OUTSIDE_ENUM, frozenset({"/genre:enum"})),
    "live_multiple_947-197-0": (OUTSIDE_ENUM, frozenset({"/duration:enum"})),
    "live_parallel_multiple_2-2-0": (OUTSIDE_ENUM, frozenset({"/command:enum"})),
    "live_multiple_552-153-1": (STRING_ENUM, frozenset({"/is_unisex:enum", "/is_unisex:type"})),
    **{
        id_: (STRING_ENUM, frozenset({"/number_of_rooms:enum", "/number_of_rooms:type"}))
        for id_ in ("live_multiple_595-158-1", "live_multiple_596-158-2")
    },
    **{
        id_: (STRING_ENUM, frozenset({"/in_unit_laundry:enum", "/in_unit_laundry:type"}))
        for id_ in ("live_multiple_731-167-2", "live_multiple_733-167-4", "live_multiple_735-167-6")
    },
    "parallel_multiple_21": (SOURCE_TEXT, frozenset({"/x:type", "/y:type"})),
    "parallel_multiple_94": (ITEM_TYPE, frozenset(f"/elements/{i}:type" for i in range(5))),
    "simple_java_26": (
        SOURCE_TEXT,
        frozenset({"/concurrency:type", "/holdability:type", "/resultSetType:type"}),
    ),
    "simple_java_35": (SOURCE_TEXT, frozenset({"/destination:type"})),
    "simple_java_38": (SOURCE_TEXT, frozenset({"/filteredSource:type"})),
    "simple_java_45": (SOURCE_TEXT, frozenset({"/environ:type"})),
    "simple_java_58": (SOURCE_TEXT, frozenset({"/values:type"})),
    "simple_java_69": (SOURCE_TEXT, frozenset({"/buf:type"})),
    "simple_java_72": (SOURCE_TEXT, frozenset({"/ch:type"})),
    "simple_java_82": (SOURCE_TEXT, frozenset({"/args:type"})),
    "simple_java_87": (SOURCE_TEXT, frozenset({"/suspendPolicy:type"})),
    "simple_java_88": (SOURCE_TEXT, frozenset({"/suspendPolicy:type"})),
    "simple_javascript_5": (
        SOURCE_TEXT, frozenset({"/store/initialState:type", "/store/reducers:type"})
    ),
    "simple_javascript_9": (SOURCE_TEXT, frozenset({"/jsonPayload:type"})),
    "simple_javascript_11": (SOURCE_TEXT, frozenset({"/items:type"})),
    "simple_javascript_15": (
        SOURCE_TEXT, frozenset({"/chartLayout:type", "/data:type", "/labels:type"})
    ),
    "simple_javascript_19": (SOURCE_TEXT, frozenset({"/property:type", "/textures:type"})),
    "simple_javascript_32": (SOURCE_TEXT, frozenset({"/queue:type"})),
    "simple_javascript_37": (SOURCE_TEXT, frozenset({"/statements:type"})),
    "simple_javascript_39": (SOURCE_TEXT, frozenset({"/parameters:type"})),
}


# --------------------------------------------------------------------------- loading


def _load(path: Path) -> list[dict]:
    """BFCL files are JSON Lines despite the .json suffix."""
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _file_params(sub: str = "") -> list:
    data = CORPORA / CORPUS / "data"
    if not data.is_dir():
        return [pytest.param(None, id="corpus-missing")]
    return [pytest.param(p.name, id=p.stem) for p in sorted((data / sub).glob("*.json"))]


@functools.cache
def _entries(name: str, answers: bool = False) -> list[dict]:
    data = require_corpus(CORPUS) / "data"
    return _load(data / "possible_answer" / name if answers else data / name)


@functools.cache
def _spec(fn_json: str) -> dict:
    return bfcl_function_to_spec(json.loads(fn_json))


@functools.cache
def _publish_check(fn_json: str) -> str:
    """check_schema's dialect, or the refusal as text (cached: the check costs ~1 ms)."""
    try:
        return check_schema(_spec(fn_json)["input_schema"])
    except Exception as exc:  # noqa: BLE001 - reported by the caller
        return repr(exc)


@functools.cache
def _validator(fn_json: str):
    return compile_validator(_spec(fn_json)["input_schema"])


def _key(fn: dict) -> str:
    # Many live_* functions repeat across entries; convert and compile each once.
    return json.dumps(fn, sort_keys=True)


def _answered_calls(name: str):
    """(id, function definition, ground-truth params) for every expected call in one file."""
    functions = {e["id"]: e["function"] for e in _entries(name)}
    for answer in _entries(name, answers=True):
        for call in answer["ground_truth"]:
            ((fn_name, params),) = call.items()
            matches = [f for f in functions[answer["id"]] if f["name"] == fn_name]
            assert len(matches) == 1, (answer["id"], fn_name)
            yield answer["id"], matches[0], params


def _signature(issues) -> frozenset[str]:
    return frozenset(f"{i.pointer}:{i.keyword}" for i in issues)


# --------------------------------------------------------------------------- corpus


@pytest.mark.corpora
@pytest.mark.parametrize("name", _file_params())
def test_it_converts_every_function_to_a_publishable_schema(name):
    require_corpus(CORPUS)
    refused = {}
    for entry in _entries(name):
        for fn in entry["function"]:
            spec = _spec(_key(fn))
            assert spec["name"] == fn["name"] and spec["version"] == 1
            assert spec["input_schema"]["additionalProperties"] is False
            outcome = _publish_check(_key(fn))
            if outcome != DIALECT_2020_12:
                refused[(entry["id"], fn["name"])] = outcome
    assert refused == {}


@pytest.mark.corpora
@pytest.mark.parametrize("name", _file_params("possible_answer"))
def test_it_validates_every_ground_truth_call(name):
    require_corpus(CORPUS)
    failing: dict[str, frozenset[str]] = {}
    ids = set()
    for id_, fn, params in _answered_calls(name):
        ids.add(id_)
        issues = _validator(_key(fn)).validate(bfcl_ground_truth_call(params))
        if issues:
            failing[id_] = failing.get(id_, frozenset()) | _signature(issues)
    expected = {id_: issues for id_, (_, issues) in KNOWN_BAD.items() if id_ in ids}
    # Exact in both directions: an allow-listed id that validates fails this test too.
    assert failing == expected


@pytest.mark.corpora
def test_it_allow_lists_only_ids_that_exist():
    require_corpus(CORPUS)
    answered = {
        a["id"]
        for p in _file_params("possible_answer")
        for a in _entries(p.values[0], answers=True)
    }
    assert len(answered) == 2501
    assert set(KNOWN_BAD) <= answered


@pytest.mark.corpora
@pytest.mark.parametrize("name", _file_params("possible_answer"))
def test_it_rejects_mutated_ground_truth_calls(name):
    require_corpus(CORPUS)
    checked = {"drop_required": 0, "undeclared": 0, "wrong_type": 0}
    for id_, fn, params in _answered_calls(name):
        if id_ in KNOWN_BAD:
            continue
        validator, schema = _validator(_key(fn)), _spec(_key(fn))["input_schema"]
        args = bfcl_ground_truth_call(params)
        assert validator.validate(args) == []

        present = [p for p in schema.get("required", []) if p in args]
        if present:
            dropped = {k: v for k, v in args.items() if k != present[0]}
            assert ":required" in _signature(validator.validate(dropped)), id_
            checked["drop_required"] += 1

        extra = {**args, "__undeclared__": 1}
        assert _signature(validator.validate(extra)) == {":additionalProperties"}, id_
        checked["undeclared"] += 1

        for param, value in args.items():
            declared = schema["properties"][param].get("type")
            if declared is None:
                continue  # `any`: every value is the right type
            wrong = _value_not_of(declared)
            assert f"/{param}:type" in _signature(validator.validate({**args, param: wrong})), id_
            checked["wrong_type"] += 1
            break
    assert min(checked.values()) > 0, checked


def _value_not_of(declared: str | list[str]):
    declared = {declared} if isinstance(declared, str) else set(declared)
    for json_type, probe in (("string", "x"), ("boolean", True), ("object", {"x": 1})):
        if json_type not in declared:
            return probe
    raise AssertionError(f"no probe for {declared}")


# --------------------------------------------------------------------------- strict mode

BFCL_DEFINITIONS = 6616  # function definitions in data/*.json (repeats included)
# Measured: definitions whose format=openai rendering is `strict: true`. Exact, so a change in
# the strict rules shows up here. The other 212: free-form objects, untyped (`any`) parameters
# and one minItems/maxItems on an integer (which reason is named first depends on key order).
BFCL_STRICT = 6404


@pytest.mark.corpora
def test_it_renders_bfcl_definitions_strict_where_they_fit(capsys):
    require_corpus(CORPUS)
    total = strict = 0
    reasons: dict[str, int] = {}
    for param in _file_params():
        for entry in _entries(param.values[0]):
            for fn in entry["function"]:
                total += 1
                form = _strict(_key(fn))
                if form.strict:
                    strict += 1
                    # The strict parameters are themselves a publishable 2020-12 schema.
                    assert check_schema(form.parameters) == DIALECT_2020_12
                else:
                    kind = form.reason.split(" at ")[0]
                    reasons[kind] = reasons.get(kind, 0) + 1
    with capsys.disabled():
        print(f"\nBFCL format=openai strict: {strict}/{total}; not strict: {reasons}")
    assert total == BFCL_DEFINITIONS
    assert strict == BFCL_STRICT


@functools.cache
def _strict(fn_json: str):
    return strict_form(_spec(fn_json)["input_schema"])


@functools.cache
def _strict_validator(fn_json: str):
    return compile_validator(_strict(fn_json).parameters)


@pytest.mark.corpora
@pytest.mark.parametrize("name", _file_params("possible_answer"))
def test_it_maps_a_strict_calls_nulls_back_to_the_ground_truth(name):
    """What a strict-mode model sends for a ground-truth call (every omitted optional parameter
    as null) fits the strict schema, and null_to_absent turns it back into the ground truth
    (a parameter whose default is null stays null), which the original schema accepts."""
    require_corpus(CORPUS)
    checked = 0
    for id_, fn, params in _answered_calls(name):
        form = _strict(_key(fn))
        if id_ in KNOWN_BAD or not form.strict or any(p.count("/") > 1 for p in form.null_as_absent):
            continue
        args = bfcl_ground_truth_call(params)
        sent = {**{p: None for p in form.parameters["required"] if p not in args}, **args}
        assert _strict_validator(_key(fn)).validate(sent) == [], id_
        mapped, _ = null_to_absent(sent, form.null_as_absent)
        # Mapped back: absent again, except parameters whose declared default is null anyway.
        kept_nulls = {k for k in set(sent) - set(args) if f"/{k}" not in form.null_as_absent}
        assert mapped == {**args, **dict.fromkeys(kept_nulls)}, id_
        assert _validator(_key(fn)).validate(mapped) == [], id_
        checked += 1
    assert checked > 0


# --------------------------------------------------------------------------- converter


def test_it_maps_bfcl_type_names_to_json_schema():
    fn = {
        "name": "calendar.create_event",
        "description": "Create an event.",
        "parameters": {
            "type": "dict",
            "properties": {
                "title": {"type": "String", "description": "Title."},
                "minutes": {"type": "long"},
                "ratio": {"type": "double"},
                "where": {"type": "tuple", "items": {"type": "float"}},
                "tags": {"type": "ArrayList", "items": {"type": "char"}},
                "meta": {"type": "HashMap"},
                "flag": {"type": "Boolean"},
                "anything": {"type": "any"},
                "blank": {"type": ""},
            },
            "required": ["title"],
        },
    }
    spec = bfcl_function_to_spec(fn)
    assert spec["name"] == "calendar.create_event" and spec["version"] == 1
    assert spec["description"] == "Create an event."
    assert spec["input_schema"] == {
        "$schema": DIALECT_2020_12,
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "Title."},
            "minutes": {"type": "integer"},
            "ratio": {"type": "number"},
            "where": {"type": "array", "items": {"type": "number"}},
            "tags": {"type": "array", "items": {"type": "string"}},
            "meta": {"type": "object"},
            "flag": {"type": "boolean"},
            "anything": {},
            "blank": {},
        },
        "required": ["title"],
        "additionalProperties": False,
    }
    assert check_schema(spec["input_schema"]) == DIALECT_2020_12


def test_it_handles_bfcl_keys_that_are_not_json_schema():
    schema = bfcl_function_to_spec({
        "name": "f",
        "description": "",
        "parameters": {
            "type": "dict",
            "optional": ["b"],
            "properties": {
                "a": {"type": "string", "required": True},
                "b": {"type": "integer", "optional": True, "default": None},
                "c": {"type": "array", "items": {"type": "string"}, "enum": ["x", "y"]},
                "d": {"type": "dict", "properties": {"e": {"type": "float"}}, "required": ["e"]},
            },
            "required": [],
        },
    })["input_schema"]
    assert schema["required"] == ["a"]  # property-level `required: true` lifted
    assert schema["properties"]["b"] == {"type": ["integer", "null"], "default": None}
    assert schema["properties"]["c"] == {
        "type": "array",
        "items": {"type": "string", "enum": ["x", "y"]},  # BFCL's array-level enum moved
    }
    assert schema["properties"]["d"]["required"] == ["e"]
    assert "optional" not in json.dumps(schema)
    check_schema(schema)


def test_it_refuses_an_unknown_bfcl_type():
    with pytest.raises(BFCLConversionError):
        bfcl_function_to_spec(
            {"name": "f", "parameters": {"type": "dict", "properties": {"a": {"type": "Strin"}}}}
        )


def test_it_picks_the_first_acceptable_value_and_omits_omittable_params():
    call = {
        "unit": ["", "units"],  # omittable
        "city": ["Paris", "paris"],
        "ids": [[1, 2, 3]],
        "params": [{"limit": [50], "schemaFilter": ["public"], "cursor": [""]}],
        "rows": [[{"name": ["Ann"], "age": [18, 19]}, {"name": ["Bo"], "age": [21]}]],
        "meta": [{"format": "epoch_millis"}],  # a bare literal inside a nested dict
        "nothing": [],
    }
    assert bfcl_ground_truth_call(call) == {
        "city": "Paris",
        "ids": [1, 2, 3],
        "params": {"limit": 50, "schemaFilter": "public"},
        "rows": [{"name": "Ann", "age": 18}, {"name": "Bo", "age": 21}],
        "meta": {"format": "epoch_millis"},
    }
