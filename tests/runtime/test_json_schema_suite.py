"""JSON-Schema-Test-Suite, draft 2020-12, run through ``toolops.runtime.validation``.

Every test case is one pytest test: its schema is compiled once with *our*
``compile_validator``, each of its tests is validated and compared with ``valid``; all
mismatches of the case are reported together. Known gaps live in explicit allow-lists keyed by
``(file, case description) -> {test descriptions}`` (unique in the suite, checked below). A case
whose failures equal its allow-list xfails; an unlisted failure *or an allow-listed test that
now passes* fails the case, so the lists stay exact.

What runs:

* ``tests/draft2020-12/*.json`` (required, format as annotation): 1299 tests, 6 allow-listed.
* ``optional/format/*.json`` with ``format_assertion=True``: 764 tests, 92 allow-listed, with
  a reason per format (the numbers depend on ``jsonschema[format-nongpl]`` being installed).
* ``optional/*.json`` (format as annotation): 162 tests, 48 allow-listed, all in
  ``dependencies-compatibility.json`` (draft-07 ``dependencies`` is not a 2020-12 keyword),
  ``ecmascript-regex.json`` (``pattern`` uses Python ``re``, not ECMA-262) and
  ``format-assertion.json`` (``$vocabulary`` is not honoured). No optional file is skipped.

Remote refs resolve from ``remotes/`` registered at ``http://localhost:1234/`` and the
2020-12 meta-schemas of ``metaschemas/`` at their ``$id``; nothing is fetched.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from tests.conftest import CORPORA, require_corpus
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

UNICODE_PROPERTY = "Python `re` has no Unicode property escapes (\\p{...}); needs `regex`"
VOCABULARY = "$vocabulary is not honoured: validation keywords apply regardless"
DEPENDENCIES = "draft-07 `dependencies` is not a 2020-12 keyword, so it is ignored"
CONTROL_ESCAPE = "Python `re` has no \\cX control escapes"
UNICODE_CLASSES = "Python `re` \\d and \\w match Unicode digits/letters, ECMA-262 only ASCII"
BOM_WHITESPACE = "Python `re` \\s does not match U+FEFF, ECMA-262 \\s does"
FORMAT_VOCABULARY = "$vocabulary format-assertion is not honoured: it is a ToolSpec setting"


def _because(reason: str, *tests: str) -> dict[str, str]:
    return dict.fromkeys(tests, reason)


# (file, case description) -> {test description: reason}
REQUIRED_KNOWN_FAILURES: dict[tuple[str, str], dict[str, str]] = {
    ("pattern.json", "pattern with Unicode property escape requires unicode mode"): _because(
        UNICODE_PROPERTY, "ASCII letters match", "Non-ASCII letters match", "Digits do not match"
    ),
    ("patternProperties.json", "patternProperties with Unicode property escape"): _because(
        UNICODE_PROPERTY,
        "Unicode letter property name matches",
        "Non-letter property name does not match pattern",
    ),
    ("vocabulary.json", "schema that uses custom metaschema with with no validation vocabulary"):
        _because(VOCABULARY, "no validation: invalid number, but it still validates"),
}

_DEPS = "dependencies-compatibility.json"
_ECMA = "ecmascript-regex.json"
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
    (_ECMA, "ECMA 262 regex escapes control codes with \\c and upper letter"): _because(
        CONTROL_ESCAPE, "does not match", "matches"
    ),
    (_ECMA, "ECMA 262 regex escapes control codes with \\c and lower letter"): _because(
        CONTROL_ESCAPE, "does not match", "matches"
    ),
    (_ECMA, "ECMA 262 \\d matches ascii digits only"): _because(
        UNICODE_CLASSES,
        "NKO DIGIT ZERO does not match (unlike e.g. Python)",
        "NKO DIGIT ZERO (as \\u escape) does not match",
    ),
    (_ECMA, "ECMA 262 \\D matches everything but ascii digits"): _because(
        UNICODE_CLASSES,
        "NKO DIGIT ZERO matches (unlike e.g. Python)",
        "NKO DIGIT ZERO (as \\u escape) matches",
    ),
    (_ECMA, "ECMA 262 \\w matches ascii letters only"): _because(
        UNICODE_CLASSES, "latin-1 e-acute does not match (unlike e.g. Python)"
    ),
    (_ECMA, "ECMA 262 \\W matches everything but ascii letters"): _because(
        UNICODE_CLASSES, "latin-1 e-acute matches (unlike e.g. Python)"
    ),
    (_ECMA, "ECMA 262 \\s matches whitespace"): _because(
        BOM_WHITESPACE, "zero-width whitespace matches"
    ),
    (_ECMA, "ECMA 262 \\S matches everything but whitespace"): _because(
        BOM_WHITESPACE, "zero-width whitespace does not match"
    ),
    (_ECMA, "patterns always use unicode semantics with pattern"): _because(
        UNICODE_PROPERTY,
        "ascii character in json string",
        "literal unicode character in json string",
        "unicode character in hex format in string",
        "unicode matching is case-sensitive",
    ),
    (_ECMA, "\\w in patterns matches [A-Za-z0-9_], not unicode letters"): _because(
        UNICODE_CLASSES,
        "literal unicode character in json string",
        "unicode character in hex format in string",
    ),
    (_ECMA, "\\d in pattern matches [0-9], not unicode digits"): _because(
        UNICODE_CLASSES, "non-ascii digits (BENGALI DIGIT FOUR, BENGALI DIGIT TWO)"
    ),
    (_ECMA, "pattern with non-ASCII digits"): _because(
        UNICODE_PROPERTY,
        "ascii digits",
        "ascii non-digits",
        "non-ascii digits (BENGALI DIGIT FOUR, BENGALI DIGIT TWO)",
    ),
    (_ECMA, "patterns always use unicode semantics with patternProperties"): _because(
        UNICODE_PROPERTY,
        "ascii character in json string",
        "literal unicode character in json string",
        "unicode character in hex format in string",
        "unicode matching is case-sensitive",
    ),
    (_ECMA, "\\w in patternProperties matches [A-Za-z0-9_], not unicode letters"): _because(
        UNICODE_CLASSES,
        "literal unicode character in json string",
        "unicode character in hex format in string",
    ),
    (_ECMA, "\\d in patternProperties matches [0-9], not unicode digits"): _because(
        UNICODE_CLASSES, "non-ascii digits (BENGALI DIGIT FOUR, BENGALI DIGIT TWO)"
    ),
    (_ECMA, "patternProperties with non-ASCII digits"): _because(
        UNICODE_PROPERTY,
        "ascii digits",
        "ascii non-digits",
        "non-ascii digits (BENGALI DIGIT FOUR, BENGALI DIGIT TWO)",
    ),
    ("format-assertion.json", "schema that uses custom metaschema with format-assertion: false"):
        _because(FORMAT_VOCABULARY, "format-assertion: false: invalid string"),
    ("format-assertion.json", "schema that uses custom metaschema with format-assertion: true"):
        _because(FORMAT_VOCABULARY, "format-assertion: true: invalid string"),
}

# Why each format checker of jsonschema 4.26 + format-nongpl extras misses some suite tests.
FORMAT_GAPS: dict[str, str] = {
    "date-time.json": "rfc3339-validator rejects leap seconds, accepts a trailing newline",
    "duration.json": "isoduration accepts ISO 8601 forms RFC 3339's ABNF forbids (PT0.5S, -P1D)",
    "ecmascript-regex.json": "no 'ecmascript-regex' checker: the format is not asserted at all",
    "email.json": "jsonschema's email check only looks for an '@'",
    "hostname.json": "fqdn accepts a trailing dot/newline, U+212A and invalid xn-- A-labels",
    "idn-hostname.json": "idna accepts trailing separators and a digit-first bidi label",
    "iri.json": "rfc3987-syntax rejects IP-literal hosts and supplementary-plane characters",
    "relative-json-pointer.json": "jsonschema accepts non-ASCII digits and rejects a prefix '100'",
    "time.json": "checked as a 1970-01-01 date-time, so leap seconds are rejected",
    "uri-reference.json": "rfc3986-validator accepts a leading zero in an embedded IPv4",
    "uri-template.json": "uri-template's parser diverges from RFC 6570 on edge cases",
    "uri.json": "rfc3986-validator accepts a leading zero in an embedded IPv4",
    "uuid.json": "uuid.UUID accepts non-ASCII digits, underscores and a trailing hyphen",
}

# (file, case description) -> test descriptions expected to fail; reason is FORMAT_GAPS[file].
FORMAT_KNOWN_FAILURES: dict[tuple[str, str], frozenset[str]] = {
    ("date-time.json", "validation of date-time strings"): frozenset({
        "a valid date-time with a leap second, UTC",
        "a valid date-time with a leap second, with minus offset",
        "a trailing newline is invalid",
    }),
    ("duration.json", "validation of duration strings"): frozenset({
        "fractional duration is not allowed by RFC 3339 ABNF",
        "years and days cannot appear without months",
        "hours and seconds cannot appear without minutes",
        "a leading sign is not allowed",
        "a number before the time separator has no unit",
        "exponent notation is not allowed in a component",
        "weeks cannot be combined with a time component",
        "weeks cannot be combined with a zero-valued component",
        "a comma as the decimal separator is invalid",
        "a sign inside a component is invalid",
    }),
    ("ecmascript-regex.json", "\\a is not an ECMA 262 control escape"): frozenset({
        "when used as a pattern",
    }),
    (
        "ecmascript-regex.json",
        "Python-specific regular expression syntax is not valid ECMA 262",
    ): frozenset({
        "Python named group (?P<name>...) is not ECMA 262",
        "Python named backreference (?P=name) is not ECMA 262",
        "inline comment group (?#...) is not ECMA 262",
    }),
    ("ecmascript-regex.json", "global inline flag groups are not valid ECMA 262"): frozenset({
        "a single global inline flag (?i)",
        "multiple global inline flags (?ims)",
    }),
    ("ecmascript-regex.json", "ECMA 262 named groups and backreferences are valid"): frozenset({
        "an ECMA 262 named group (?<name>...)",
        "an ECMA 262 named backreference \\k<name>",
    }),
    ("ecmascript-regex.json", "ECMA 262 lookbehind is valid, including variable width"): frozenset({
        "a variable-width lookbehind (ES2018)",
    }),
    ("ecmascript-regex.json", "ECMA 262 character classes and escapes"): frozenset({
        "an empty character class is valid ECMA 262",
        "a negated empty character class is valid ECMA 262",
        "a control escape \\cA is valid ECMA 262",
    }),
    ("email.json", "validation of e-mail addresses"): frozenset({
        "dot before local part is not valid",
        "dot after local part is not valid",
        "two subsequent dots inside local part are not valid",
        "an invalid domain",
        "an invalid IPv4-address-literal",
        "two email addresses is not valid",
        'full "From" header is invalid',
        "local part is required",
        "domain is required",
        "unquoted space in local part is invalid",
    }),
    ("hostname.json", "validation of host names"): frozenset({
        "trailing dot",
        "trailing newline is invalid",
        "invalid non-ASCII KELVIN SIGN (U+212A)",
    }),
    ("hostname.json", "validation of A-label (punycode) host names"): frozenset({
        "invalid Punycode",
        "contains illegal char U+302E Hangul single dot tone mark",
        "Begins with a Spacing Combining Mark",
        "Begins with a Nonspacing Mark",
        "Begins with an Enclosing Mark",
        "Exceptions that are DISALLOWED, right-to-left chars",
        "Exceptions that are DISALLOWED, left-to-right chars",
        "MIDDLE DOT with no preceding 'l'",
        "MIDDLE DOT with nothing preceding",
        "MIDDLE DOT with no following 'l'",
        "MIDDLE DOT with nothing following",
        "Greek KERAIA not followed by Greek",
        "Greek KERAIA not followed by anything",
        "Hebrew GERESH not preceded by Hebrew",
        "Hebrew GERESH not preceded by anything",
        "Hebrew GERSHAYIM not preceded by Hebrew",
        "Hebrew GERSHAYIM not preceded by anything",
        "KATAKANA MIDDLE DOT with no Hiragana, Katakana, or Han",
        "KATAKANA MIDDLE DOT with no other characters",
        "Arabic-Indic digits mixed with Extended Arabic-Indic digits",
        "ZERO WIDTH JOINER not preceded by Virama",
        "ZERO WIDTH JOINER not preceded by anything",
        'contains "--" in the 3rd and 4th position',
    }),
    ("idn-hostname.json", "validation of internationalized host names"): frozenset({
        "Bidi domain name with a digit-first label is invalid",
    }),
    ("idn-hostname.json", "validation of separators in internationalized host names"): frozenset({
        "trailing dot",
        "trailing ideographic full stop",
        "trailing fullwidth full stop",
        "trailing halfwidth ideographic full stop",
    }),
    ("iri.json", "validation of IRIs"): frozenset({
        "a valid IRI with a compressed IPv6 host",
        "an IPvFuture host with an uppercase version letter is valid",
        "a valid IRI with a supplementary-plane character in the path",
        "a valid IRI with a supplementary-plane private-use char in query",
    }),
    ("relative-json-pointer.json", "validation of Relative JSON Pointers (RJP)"): frozenset({
        "non-ASCII digit in the prefix is not allowed",
        "multi-digit prefix with a zero followed by another digit",
    }),
    ("time.json", "validation of time strings"): frozenset({
        "a valid time string with leap second, Zulu",
        "valid leap second, zero time-offset",
        "valid leap second, positive time-offset",
        "valid leap second, large positive time-offset",
        "valid leap second, negative time-offset",
        "valid leap second, large negative time-offset",
    }),
    ("uri-reference.json", "validation of URI References"): frozenset({
        "a leading zero in the IPv4 part of an IPv6 literal",
    }),
    ("uri-template.json", "format: uri-template"): frozenset({
        "a double dot in a variable name is invalid",
        "a variable name may start with a percent-encoded triplet",
        "a four-digit prefix max-length is valid",
        "a leading zero in the prefix max-length is invalid",
        "a space in a literal is invalid",
        "a delete character in a literal is invalid",
        "a trailing comma in the variable list is invalid",
        "a default value in a varspec is invalid",
        "an operator in place of the first varspec is invalid",
    }),
    ("uri.json", "validation of URIs"): frozenset({
        "leading zero in an embedded IPv4 address is invalid",
    }),
    ("uuid.json", "uuid format"): frozenset({
        "trailing hyphen after a complete UUID is invalid",
        "non-ASCII digit '২' (a Bengali 2) is invalid",
        "an underscore in place of a hex digit is invalid",
    }),
}

# Publish-time refusals among the required schemas: Python `re` cannot compile \p{...}, so the
# meta-schema's "regex" format check refuses these before any call could crash on them.
REQUIRED_REFUSED_AT_PUBLISH: dict[tuple[str, str], str] = {
    key: "invalid_schema"
    for key in REQUIRED_KNOWN_FAILURES
    if key[0] in {"pattern.json", "patternProperties.json"}
}


# --------------------------------------------------------------------------- loading


def _load_cases(folder: Path) -> list[tuple[str, int, dict]]:
    """(file name, case index, case) for every case of every ``*.json`` directly in folder."""
    return [
        (path.name, index, case)
        for path in sorted(folder.glob("*.json"))
        for index, case in enumerate(json.loads(path.read_text(encoding="utf-8")))
    ]


def _params(subfolder: str) -> list:
    """One pytest param per case (collected without skipping when the corpus is absent)."""
    root = CORPORA / CORPUS
    if not root.is_dir():
        # A single param whose require_corpus() call skips (or fails in CI).
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
    assert sum(map(len, REQUIRED_KNOWN_FAILURES.values())) == 6
    assert sum(map(len, FORMAT_KNOWN_FAILURES.values())) == 92
    assert sum(map(len, OPTIONAL_KNOWN_FAILURES.values())) == 48


def test_it_has_the_format_checkers_the_allow_list_assumes():
    # Without jsonschema[format-nongpl] far more format tests fail; say so plainly.
    expected = {
        "date", "date-time", "duration", "email", "hostname", "idn-email", "idn-hostname",
        "ipv4", "ipv6", "iri", "iri-reference", "json-pointer", "regex",
        "relative-json-pointer", "time", "uri", "uri-reference", "uri-template", "uuid",
    }
    assert expected <= set(Draft202012Validator.FORMAT_CHECKER.checkers)


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
