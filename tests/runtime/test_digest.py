"""RFC 8785 canonical JSON and the invocation digest (docs/concepts/admission.md): vectors, properties, pre-image."""
from __future__ import annotations

import hashlib
import json
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.conftest import CORPORA, require_corpus
from toolops.runtime.digest import CanonicalizationError, canonical_json, invocation_digest
from toolops.runtime.parser import MAX_SAFE_INTEGER, parse_strict

VECTORS_DIR = CORPORA / "jcs-vectors" / "testdata"
VECTOR_NAMES = (
    sorted(p.stem for p in (VECTORS_DIR / "input").iterdir()) if (VECTORS_DIR / "input").is_dir() else []
)


def _vectors():
    return require_corpus("jcs-vectors") / "testdata"


# --------------------------------------------------------------------------- RFC 8785 vectors


def test_it_sees_all_six_upstream_vectors():
    testdata = _vectors()
    names = sorted(p.stem for p in (testdata / "input").iterdir())
    assert names == ["arrays", "french", "structures", "unicode", "values", "weird"]
    assert names == sorted(p.stem for p in (testdata / "output").iterdir())
    assert names == sorted(p.stem for p in (testdata / "outhex").iterdir())


@pytest.mark.parametrize("name", VECTOR_NAMES or ["<missing>"])
def test_it_canonicalizes_each_rfc8785_vector_byte_for_byte(name):
    testdata = _vectors()
    value = json.loads((testdata / "input" / f"{name}.json").read_bytes())
    assert canonical_json(value) == (testdata / "output" / f"{name}.json").read_bytes()


@pytest.mark.parametrize("name", VECTOR_NAMES or ["<missing>"])
def test_it_matches_the_hex_form_of_each_rfc8785_vector(name):
    testdata = _vectors()
    value = json.loads((testdata / "input" / f"{name}.json").read_bytes())
    expected = bytes.fromhex((testdata / "outhex" / f"{name}.txt").read_text(encoding="ascii"))
    assert canonical_json(value) == expected


@pytest.mark.parametrize("name", VECTOR_NAMES or ["<missing>"])
def test_it_reaches_the_same_bytes_through_the_strict_parser(name):
    """The runtime path is parse_strict → canonical_json, not json.loads: same answer required."""
    testdata = _vectors()
    value = parse_strict((testdata / "input" / f"{name}.json").read_bytes())
    assert canonical_json(value) == (testdata / "output" / f"{name}.json").read_bytes()


@pytest.mark.parametrize("name", VECTOR_NAMES or ["<missing>"])
def test_it_keeps_a_canonical_vector_fixed_when_canonicalized_again(name):
    testdata = _vectors()
    output = (testdata / "output" / f"{name}.json").read_bytes()
    assert canonical_json(json.loads(output)) == output


# --------------------------------------------------------------------------- the digest pre-image


def test_it_digests_tenant_nul_ref_nul_canonical_arguments():
    """Hand check: sha256(b"acme" NUL b"weather.get_forecast@1" NUL JCS(args))."""
    args = {"date": "2026-07-20", "city": "Paris"}
    preimage = b"acme\x00weather.get_forecast@1\x00" + b'{"city":"Paris","date":"2026-07-20"}'
    digest = invocation_digest(tenant="acme", tool_ref="weather.get_forecast@1", normalized_arguments=args)
    assert digest == hashlib.sha256(preimage).hexdigest()
    assert digest == "ec99e6af322e013fd16bd59522cf3ee60f0c14ff8c5ca8e5052cc3c9122bc06b"


def test_it_answers_lowercase_hex_sha256():
    digest = invocation_digest(tenant="t", tool_ref="a.b@1", normalized_arguments={})
    assert len(digest) == 64 and digest == digest.lower()
    int(digest, 16)


def test_it_separates_the_parts_so_shifted_boundaries_differ():
    """NUL separators: moving characters between tenant and ref must change the digest."""
    a = invocation_digest(tenant="ab", tool_ref="c.d@1", normalized_arguments={})
    b = invocation_digest(tenant="a", tool_ref="bc.d@1", normalized_arguments={})
    assert a != b


def test_it_refuses_an_integer_beyond_ieee754_precision():
    with pytest.raises(CanonicalizationError):
        canonical_json({"n": 2**53 + 1})


def test_it_refuses_a_non_finite_float():
    with pytest.raises(CanonicalizationError):
        canonical_json([float("nan")])


# --------------------------------------------------------------------------- properties

# Text the strict parser accepts: any code point but a lone surrogate.
TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(TEXT, children, max_size=5),
    max_leaves=25,
)
TENANTS = st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,20}\Z")
TOOL_REFS = st.from_regex(r"\A[a-z][a-z0-9_]{0,10}(\.[a-z][a-z0-9_]{0,10}){0,2}@[1-9][0-9]{0,3}\Z")


def _shuffled(value, rng: random.Random):
    """The same JSON value with every object's member order permuted."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


SERIALIZATIONS = st.fixed_dictionaries(
    {
        "indent": st.sampled_from([None, 0, 2, "\t"]),
        "ensure_ascii": st.booleans(),
        "separators": st.sampled_from([None, (",", ":"), (" , ", " : ")]),
        "sort_keys": st.booleans(),
        "seed": st.integers(min_value=0, max_value=2**32),
    }
)


def _serialize(value, how: dict) -> bytes:
    shuffled = _shuffled(value, random.Random(how["seed"]))
    text = json.dumps(
        shuffled, indent=how["indent"], ensure_ascii=how["ensure_ascii"], separators=how["separators"],
        sort_keys=how["sort_keys"], allow_nan=False,
    )
    return text.encode("utf-8")


def _digest_of(raw: bytes, *, tenant: str = "acme", ref: str = "weather.get_forecast@1") -> str:
    return invocation_digest(tenant=tenant, tool_ref=ref, normalized_arguments=parse_strict(raw))


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, first=SERIALIZATIONS, second=SERIALIZATIONS)
def test_it_gives_every_serialization_of_one_value_the_same_canonical_bytes(value, first, second):
    a, b = parse_strict(_serialize(value, first)), parse_strict(_serialize(value, second))
    assert canonical_json(a) == canonical_json(b)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, first=SERIALIZATIONS, second=SERIALIZATIONS)
def test_it_gives_every_serialization_of_one_value_the_same_digest(value, first, second):
    assert _digest_of(_serialize(value, first)) == _digest_of(_serialize(value, second))


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES, how=SERIALIZATIONS)
def test_it_round_trips_canonical_bytes_to_themselves(value, how):
    """JCS output is itself valid input, and canonicalizing it again changes nothing — integral
    doubles of 2**53 and beyond included (JCS prints them as integer literals)."""
    canonical = canonical_json(parse_strict(_serialize(value, how)))
    assert canonical_json(parse_strict(canonical)) == canonical


def test_it_accepts_the_canonical_form_of_every_value_it_accepted():
    accepted = parse_strict(b'{"n": 1e16}')
    canonical = canonical_json(accepted)
    assert canonical == b'{"n":10000000000000000}'
    assert parse_strict(canonical) == accepted


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES, how=SERIALIZATIONS, tenants=st.tuples(TENANTS, TENANTS))
def test_it_gives_other_tenants_other_digests(value, how, tenants):
    assume(tenants[0] != tenants[1])
    raw = _serialize(value, how)
    assert _digest_of(raw, tenant=tenants[0]) != _digest_of(raw, tenant=tenants[1])


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES, how=SERIALIZATIONS, refs=st.tuples(TOOL_REFS, TOOL_REFS))
def test_it_gives_other_tool_versions_other_digests(value, how, refs):
    assume(refs[0] != refs[1])
    raw = _serialize(value, how)
    assert _digest_of(raw, ref=refs[0]) != _digest_of(raw, ref=refs[1])


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES, how=SERIALIZATIONS, tenant=TENANTS, ref=TOOL_REFS)
def test_it_digests_exactly_the_documented_preimage(value, how, tenant, ref):
    parsed = parse_strict(_serialize(value, how))
    preimage = tenant.encode() + b"\x00" + ref.encode() + b"\x00" + canonical_json(parsed)
    expected = hashlib.sha256(preimage).hexdigest()
    assert invocation_digest(tenant=tenant, tool_ref=ref, normalized_arguments=parsed) == expected


def test_it_gives_a_changed_argument_a_changed_digest():
    base = {"city": "Paris", "date": "2026-07-20"}
    digests = {
        invocation_digest(tenant="acme", tool_ref="weather.get_forecast@1", normalized_arguments=args)
        for args in (base, {**base, "city": "Lyon"}, {**base, "date": "2026-07-21"}, {**base, "extra": None}, [base])
    }
    assert len(digests) == 5
