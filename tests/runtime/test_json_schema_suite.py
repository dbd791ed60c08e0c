"""JSON-Schema-Test-Suite, draft 2020-12, run through ``toolops.runtime.validation``.

Every test case is one pytest test: its schema is compiled once with *our*
``compile_validator``, each of its tests is validated and compared with ``valid``; all
mismatches of the case are reported together. Known gaps live in explicit allow-lists keyed by
``(file, case description) -> {test descriptions}`` (unique in the suite, checked below). A case
whose failures equal its allow-list xfails; an unlisted failure *or an allow-listed test that
now passes* fails the case, so the lists stay exact.

What runs:

* ``tests/draft2020-12/*.json`` (required, format as annotation): 1299 tests, none allow-listed
  (ECMA-262 patterns via ``regex``; ``$vocabulary`` of a custom meta-schema honoured).
* ``optional/format/*.json`` with ``format_assertion=True``: 764 tests, none allow-listed (the
  strict RFC checkers of ``toolops.runtime.formats``).
* ``optional/*.json`` (format as annotation): 162 tests, 14 allow-listed, all in
  ``dependencies-compatibility.json`` (draft-07 ``dependencies`` is not a 2020-12 keyword).
  No optional file is skipped.

``test_it_reaches_the_conformance_targets`` prints the counts (required, formats, per format)
and checks issue 13's targets without the allow-lists.

Remote refs resolve from ``remotes/`` registered at ``http://localhost:1234/`` and the
2020-12 meta-schemas of ``metaschemas/`` at their ``$id``; nothing is fetched.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from tests.conftest import CORPORA, require_corpus
from toolops.runtime.formats import ASSERTED_FORMATS, OWN_CHECKERS
from toolops.runtime.validation import (
    SchemaRefused,
    check_schema,
    compile_validator,
    offline_registry_with,
)

CORPUS = "json-schema-test-suite"
TESTS = Path("tests") / "draft2020-12"
REQUIRED_TEST_COUNT = 1299  # SOURCE.md: 46 files, 383 cases
FORMAT_TEST_COUNT = 764  # SOURCE.md: 21 files, 28 cases
OPTIONAL_TEST_COUNT = 162  # SOURCE.md: 13 files, 50 cases

DEPENDENCIES = "draft-07 `dependencies` is not a 2020-12 keyword, so it is ignored"

# Targets of issue 13 (the counts are printed by test_it_reaches_the_conformance_targets).
REQUIRED_TARGET = 1298
FORMAT_TARGET = 740
EXACT_FORMATS = ("date", "date-time", "time", "duration", "uuid", "email", "ipv4", "ipv6", "uri")


def _because(reason: str, *tests: str) -> dict[str, str]:
    return dict.fromkeys(tests, reason)


# (file, case description) -> {test description: reason}. Empty: every required test passes
# (ECMA-262 patterns through `regex`, $vocabulary honoured).
REQUIRED_KNOWN_FAILURES: dict[tuple[str, str], dict[str, str]] = {}

_DEPS = "dependencies-compatibility.json"
OPTIONAL_KNOWN_FAILURES: dict[tuple[str, str], dict[str, str]] = {
    (_DEPS, "single dependency"): _because(DEPENDENCIES, "missing dependency"),
    (_DEPS, "multiple dependents required"): _because(
        DEPENDENCIES, "missing dependency", "missing other dependency", "missing both dependencies"
    ),
    (_DEPS, "dependencies with escaped characters"): _because(
        DEPENDENCIES, "CRLF missing dependent", "quoted quotes missing dependent"
    ),
    (_DEPS, "single schema dependency"): _because(
        DEPENDENCIES, "wrong type", "wrong type other", "wrong type both"
    ),
    (_DEPS, "boolean subschemas"): _because(
        DEPENDENCIES,
        "object with property having schema false is invalid",
        "object with both properties is invalid",
    ),
    (_DEPS, "schema dependencies with escaped characters"): _because(
        DEPENDENCIES,
        "quoted quote",
        "quoted tab invalid under dependent schema",
        "quoted quote invalid under dependent schema",
    ),
}

# Why a format file still misses suite tests (file -> reason). Empty: all 764 pass with the
# checkers of toolops.runtime.formats.
FORMAT_GAPS: dict[str, str] = {}

# (file, case description) -> test descriptions expected to fail; reason is FORMAT_GAPS[file].
FORMAT_KNOWN_FAILURES: dict[tuple[str, str], frozenset[str]] = {}

# Publish-time refusals among the required schemas: none (\p{...} compiles with `regex`).
REQUIRED_REFUSED_AT_PUBLISH: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------- loading


def _load_cases(folder: Path) -> list[tuple[str, int, dict]]:
    """(file name, case index, case) for every case of every ``*.json`` directly in folder."""
    return [
        (path.name, index, case)
        for path in sorted(folder.glob("*.json"))
        for index, case in enumerate(json.loads(path.read_text(encoding="utf-8")))
    ]


def _params(subfolder: str) -> list:
    """One pytest param per case (a missing corpus still collects, as one failing param)."""
    root = CORPORA / CORPUS
    if not root.is_dir():
        # A single param whose require_corpus() call fails: the corpus is part of the checkout.
        return [pytest.param(None, None, None, id="corpus-missing")]
    return [
        pytest.param(name, index, case, id=f"{Path(name).stem}:{index}")
        for name, index, case in _load_cases(root / TESTS / subfolder)
    ]


@functools.cache
def _suite_registry(root: Path):
    """Offline registry: every ``remotes/`` file at localhost:1234 + 2020-12 meta-schemas."""
    remotes = root / "remotes"
    resources = {
        f"http://localhost:1234/{p.relative_to(remotes).as_posix()}": json.loads(p.read_text())
        for p in sorted(remotes.rglob("*.json"))
    }
    for p in sorted((root / "metaschemas" / "draft2020-12").rglob("*.json")):
        meta = json.loads(p.read_text(encoding="utf-8"))
        resources[meta["$id"]] = meta
    return offline_registry_with(resources)


def _run_case(case: dict, *, format_assertion: bool) -> dict[str, str]:
    """{test description: what went wrong} for each test whose outcome differs from ``valid``."""
    registry = _suite_registry(require_corpus(CORPUS))
    try:
        validator = compile_validator(
            case["schema"], format_assertion=format_assertion, registry=registry
        )
    except Exception as exc:  # noqa: BLE001 - a crash counts as a failure of every test
        return {t["description"]: f"compile raised {exc!r}" for t in case["tests"]}
    failures = {}
    for test in case["tests"]:
        try:
            valid = not validator.validate(test["data"])
        except Exception as exc:  # noqa: BLE001 - per the suite README, a crash is a failure
            failures[test["description"]] = f"raised {exc!r}"
            continue
        if valid != test["valid"]:
            failures[test["description"]] = f"expected valid={test['valid']}, got {valid}"
    return failures


def _assert_exactly(failures: dict[str, str], allowed: dict[str, str]) -> None:
    """Fail on unlisted failures and on listed tests that pass; xfail when both sets match."""
    unexpected = {d: why for d, why in failures.items() if d not in allowed}
    now_passing = sorted(set(allowed) - set(failures))
    assert not unexpected, f"unexpected failures: {unexpected}"
    assert not now_passing, f"allow-listed but passing (remove from allow-list): {now_passing}"
    if allowed:
        pytest.xfail("; ".join(sorted(set(allowed.values()))))


# --------------------------------------------------------------------------- suite


@pytest.mark.corpora
@pytest.mark.parametrize(("file", "index", "case"), _params(""))
def test_it_passes_required_case(file, index, case):
    require_corpus(CORPUS)
    failures = _run_case(case, format_assertion=False)
    _assert_exactly(failures, REQUIRED_KNOWN_FAILURES.get((file, case["description"]), {}))


@pytest.mark.corpora
@pytest.mark.parametrize(("file", "index", "case"), _params("optional/format"))
def test_it_passes_format_case_with_format_assertion(file, index, case):
    require_corpus(CORPUS)
    failures = _run_case(case, format_assertion=True)
    listed = FORMAT_KNOWN_FAILURES.get((file, case["description"]), frozenset())
    _assert_exactly(failures, {d: FORMAT_GAPS[file] for d in listed})


@pytest.mark.corpora
@pytest.mark.parametrize(("file", "index", "case"), _params("optional"))
def test_it_passes_optional_case(file, index, case):
    require_corpus(CORPUS)
    failures = _run_case(case, format_assertion=False)
    _assert_exactly(failures, OPTIONAL_KNOWN_FAILURES.get((file, case["description"]), {}))


# --------------------------------------------------------------------------- bookkeeping


@pytest.mark.corpora
def test_it_sees_the_whole_required_suite():
    root = require_corpus(CORPUS)
    required = _load_cases(root / TESTS)
    formats = _load_cases(root / TESTS / "optional" / "format")
    assert len({name for name, _, _ in required}) == 46
    assert sum(len(case["tests"]) for _, _, case in required) == REQUIRED_TEST_COUNT
    assert sum(len(case["tests"]) for _, _, case in formats) == FORMAT_TEST_COUNT
    optional = _load_cases(root / TESTS / "optional")
    assert sum(len(case["tests"]) for _, _, case in optional) == OPTIONAL_TEST_COUNT


@pytest.mark.corpora
def test_it_names_only_existing_tests_in_allow_lists():
    """Descriptions are unique per case, so an allow-list entry names exactly one test."""
    root = require_corpus(CORPUS)
    known: dict[tuple[str, str], list[str]] = {}
    for sub in ("", "optional", "optional/format"):
        for name, _, case in _load_cases(root / TESTS / sub):
            key = (name, case["description"])
            assert key not in known, f"duplicate case description {key}"
            known[key] = [t["description"] for t in case["tests"]]
            assert len(set(known[key])) == len(known[key]), f"duplicate test in {key}"
    listed = {**REQUIRED_KNOWN_FAILURES, **FORMAT_KNOWN_FAILURES, **OPTIONAL_KNOWN_FAILURES}
    for key, tests in listed.items():
        assert key in known, f"allow-list names a missing case {key}"
        assert set(tests) <= set(known[key]), f"allow-list names missing tests in {key}"
    assert {file for file, _ in FORMAT_KNOWN_FAILURES} == set(FORMAT_GAPS)
    assert sum(map(len, REQUIRED_KNOWN_FAILURES.values())) == 0
    assert sum(map(len, FORMAT_KNOWN_FAILURES.values())) == 0
    assert sum(map(len, OPTIONAL_KNOWN_FAILURES.values())) == 14


def test_it_asserts_every_format_2020_12_defines():
    expected = {
        "date", "date-time", "duration", "email", "hostname", "idn-email", "idn-hostname",
        "ipv4", "ipv6", "iri", "iri-reference", "json-pointer", "regex",
        "relative-json-pointer", "time", "uri", "uri-reference", "uri-template", "uuid",
    }
    assert expected <= ASSERTED_FORMATS
    # The nine that must be exact are ToolOps' own RFC checkers, not the library's.
    assert set(EXACT_FORMATS) <= set(OWN_CHECKERS)


@pytest.mark.corpora
def test_it_reaches_the_conformance_targets(capsys):
    """Counts every required and format test (no allow-list involved) against issue 13's targets."""
    root = require_corpus(CORPUS)
    required_passed = required_total = 0
    for _, _, case in _load_cases(root / TESTS):
        failures = _run_case(case, format_assertion=False)
        required_total += len(case["tests"])
        required_passed += len(case["tests"]) - len(failures)
    per_format: dict[str, tuple[int, int]] = {}
    for name, _, case in _load_cases(root / TESTS / "optional" / "format"):
        failures = _run_case(case, format_assertion=True)
        passed, total = per_format.get(Path(name).stem, (0, 0))
        per_format[Path(name).stem] = (passed + len(case["tests"]) - len(failures), total + len(case["tests"]))
    format_passed = sum(p for p, _ in per_format.values())
    format_total = sum(t for _, t in per_format.values())
    with capsys.disabled():
        print(f"\nJSON-Schema-Test-Suite 2020-12: required {required_passed}/{required_total}, "
              f"formats {format_passed}/{format_total}")
        print("  " + ", ".join(f"{f} {p}/{t}" for f, (p, t) in sorted(per_format.items())))
    assert required_total == REQUIRED_TEST_COUNT and format_total == FORMAT_TEST_COUNT
    assert required_passed >= REQUIRED_TARGET
    assert format_passed >= FORMAT_TARGET
    not_exact = {f: per_format[f] for f in EXACT_FORMATS if per_format[f][0] != per_format[f][1]}
    assert not not_exact, f"formats that must be exact are not: {not_exact}"


@pytest.mark.corpora
def test_it_accepts_every_required_suite_schema_at_publish_time():
    """check_schema's offline $ref walk has no false alarms on the suite's $ref/$id tests."""
    root = require_corpus(CORPUS)
    registry = _suite_registry(root)
    refused = {}
    for name, _, case in _load_cases(root / TESTS):
        try:
            check_schema(case["schema"], registry=registry)
        except SchemaRefused as exc:
            refused[(name, case["description"])] = exc.reason
    assert refused == REQUIRED_REFUSED_AT_PUBLISH


@pytest.mark.corpora
def test_it_refuses_suite_remote_refs_without_the_remotes():
    """Without remotes/ registered, every refRemote.json schema is refused (never fetched)."""
    root = require_corpus(CORPUS)
    cases = [case for name, _, case in _load_cases(root / TESTS) if name == "refRemote.json"]
    assert len(cases) == 15
    for case in cases:
        with pytest.raises(SchemaRefused) as caught:
            check_schema(case["schema"])  # default registry: meta-schemas only
        assert caught.value.reason == "unresolvable_ref", case["description"]
