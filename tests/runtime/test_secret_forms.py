"""Secrets are found and redacted in every form the matcher claims (issue 11 item 5, issue 29
item 6; docs/redaction.md), and innocent text is left alone."""
from __future__ import annotations

import base64
import hashlib
import json
import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hostile_server import disguised_encodings, split_in_fields
from toolops.model_io.secret_forms import (
    MIN_FUZZY_LENGTH, FoldedView, base32_cores, base64_cores, encoded_variants, secret_matcher,
)
from toolops.model_io.tool_messages import REDACTED, ResultPolicy, ToolResult, encode_result, redact

SECRET = "demo-cal-Zq8_xK2pLm9vT4wR"
BEARER = f"Bearer {SECRET}"


def _encode(value, *secrets: str):
    policy = ResultPolicy(max_bytes=1 << 20, secrets=secrets or (SECRET,))
    return encode_result(ToolResult(status="ok", value=value, untrusted_text_pointers=("",)), policy=policy,
                         invocation_id="i", tool_ref="t@1")


@pytest.mark.parametrize("form", sorted(encoded_variants(SECRET)))
def test_it_finds_each_whole_value_encoding(form):
    text = f"before {encoded_variants(SECRET)[form]} after"
    assert secret_matcher([SECRET]).search(text), form


@pytest.mark.parametrize("prefix", ["", "B", "Be", "Bearer ", '{"auth":"', "xx:"])
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
def test_it_finds_base64_of_the_secret_inside_a_longer_blob_at_every_offset(prefix, encode):
    blob = encode((prefix + SECRET + '", "more": 1}').encode()).decode()
    redacted = secret_matcher([SECRET]).sub(blob, REDACTED)
    assert REDACTED in redacted
    # No offset's secret-only characters are left anywhere in the blob.
    assert not any(core in redacted for core in base64_cores(SECRET.encode()))


@pytest.mark.parametrize("prefix", ["", "a", "ab", "abc", "abcd"])
def test_it_finds_base32_of_the_secret_inside_a_longer_blob_at_every_offset(prefix):
    blob = base64.b32encode((prefix + SECRET + "!").encode()).decode()
    redacted = secret_matcher([SECRET]).sub(blob, REDACTED)
    assert REDACTED in redacted and not any(core in redacted for core in base32_cores(SECRET.encode()))


def test_it_finds_mixed_percent_json_and_case_forms():
    mixed = "".join(("%%%02x" % ord(c)) if i % 3 == 0 else ("\\u%04X" % ord(c) if i % 3 == 1 else c.upper())
                    for i, c in enumerate(SECRET))
    assert secret_matcher([SECRET]).sub(mixed, REDACTED) == REDACTED


@pytest.mark.parametrize("secret", [SECRET, BEARER])
@pytest.mark.parametrize("form", sorted(disguised_encodings(SECRET)))
def test_it_finds_each_disguise_and_replaces_only_it(secret, form):
    disguised = disguised_encodings(secret)[form]
    out = secret_matcher([secret]).sub(f"(see: {disguised}) ok", REDACTED)
    assert out.startswith("(see: ") and out.endswith(") ok") and REDACTED in out, out
    # What is left of the disguise is its edges (an encoding's padding and the few characters
    # that mix in neighbouring bytes, a trailing separator), never a run that carries the secret.
    window = 16
    assert not [disguised[i:i + window] for i in range(len(disguised) - window + 1) if disguised[i:i + window] in out], out


@pytest.mark.parametrize("form", sorted(disguised_encodings(SECRET)))
def test_it_redacts_each_disguise_from_the_tool_message(form):
    disguised = disguised_encodings(SECRET)[form]
    encoded = _encode({"page": f"Your token: {disguised}.", "n": 1})
    assert encoded.payload["redactions"] == 1
    assert disguised not in encoded.payload_bytes.decode() and REDACTED in encoded.payload_bytes.decode()


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("shape", sorted(split_in_fields(SECRET)))
def test_it_redacts_a_secret_split_across_adjacent_fields(shape):
    split = split_in_fields(SECRET)[shape]
    encoded = _encode({"found": split, "other": "text"})  # no SecretLeakError: every part was redacted
    half = len(SECRET) // 2
    assert SECRET[:half] not in encoded.payload_bytes.decode() and encoded.payload["redactions"] >= 2
    kept = redact(split, policy=ResultPolicy(secrets=(SECRET,)))  # what a record keeps
    # Every part is gone; a separator at a part's edge ("-", "_") may stay.
    leftover = [s.replace(REDACTED, "") for s in _strings(kept) if s not in ("part_1", "part_2")]
    assert all(set(piece) <= set("-_") for piece in leftover) and REDACTED in _strings(kept), kept


@pytest.mark.parametrize("form", ["literal", "base64_offset1", "hex"])
def test_it_finds_a_form_wherever_it_falls_on_the_sampling_grid(form):
    """The view is sampled every few characters; an occurrence starting at any position between
    two samples is found (a shift by one folded character per case)."""
    value = encoded_variants(SECRET)[form]
    matcher = secret_matcher([SECRET])
    for shift in range(40):
        assert matcher.sub("q" * shift + "(" + value + ")", REDACTED) == "q" * shift + f"({REDACTED})", shift


def test_it_leaves_innocent_text_alone():
    rng = random.Random(29)
    innocent = {
        "prose": "The harbour wakes before the city does. Ferries cross twice an hour &amp; gulls argue. " * 40,
        "ids": [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(50)],
        "digests": [hashlib.sha256(bytes([i])).hexdigest() for i in range(50)],
        "blobs": [base64.b64encode(rng.randbytes(300)).decode() for _ in range(20)],
        "b32": [base64.b32encode(rng.randbytes(100)).decode() for _ in range(20)],
        "letters": list("the quick brown fox jumps over the lazy dog" * 5),
        "url": "https://example.org/a%20b?q=caf%C3%A9&x=%E2%80%94",
    }
    encoded = _encode(innocent, SECRET, BEARER, "n0t-in-th3-text-at-all-XYZ")
    assert "redactions" not in encoded.payload
    assert redact(innocent, policy=ResultPolicy(secrets=(SECRET, BEARER))) == innocent


def test_a_short_secret_is_matched_as_written_never_spread_over_separators():
    short = "s3cr3t-k3y"  # folded: 9 characters, below MIN_FUZZY_LENGTH
    assert len(short.replace("-", "")) < MIN_FUZZY_LENGTH
    matcher = secret_matcher([short])
    for written in (short, short.upper(), "&#115;3cr3t-k3y", "%73%33cr3t-k3y", short.encode().hex(),
                    base64.b64encode(short.encode()).decode(), base64.b32encode(short.encode()).decode()):
        assert matcher.search(f"x {written} y"), written
    assert not matcher.search(" ".join(short))  # documented: short secrets are not matched fuzzily
    assert secret_matcher(["s3cr3t-k3y-0042"]).search(" ".join("s3cr3t-k3y-0042"))  # 12 folded: they are


def test_an_escape_cannot_swallow_the_start_of_a_secret():
    secret = "deadbeef00c0ffee1234"  # starts with hex digits
    for prefix in ("&#x", "&#", "%", "\\u", "\\x"):
        assert secret_matcher([secret]).sub(prefix + secret, REDACTED) == prefix + REDACTED, prefix


def test_it_redacts_results_and_records_in_every_encoding():
    policy = ResultPolicy(max_bytes=4096, secrets=(SECRET,))
    echoed = {name: f"x{value}y" for name, value in encoded_variants(SECRET).items()}
    encoded = encode_result(ToolResult(status="ok", value=echoed), policy=policy, invocation_id="i", tool_ref="t@1")
    text = encoded.payload_bytes.decode()
    for value in encoded_variants(SECRET).values():
        assert value not in text
    assert encoded.payload["redactions"] >= len(echoed)
    assert all(SECRET.lower() not in json.dumps(v).lower() for v in redact(echoed, policy=policy).values())


# --- properties ---------------------------------------------------------------------------------

_SEPARATORS = st.lists(st.sampled_from([" ", "\n", "\t", "-", ".", ":", "_", "/", "\u200b", "\u200c", "\u2060",
                                        "\ufeff", "\u00ad", "\u034f", "\ufe0f", "\x00"]), max_size=2).map("".join)
_CONTEXT = st.text(alphabet="!?()[]{}<>@$^ ", max_size=12)


@st.composite
def _disguised(draw, secret: str) -> str:
    out = []
    for i, ch in enumerate(secret):
        form = draw(st.sampled_from(["as_is", "upper", "fullwidth", "percent", "entity", "hex_entity", "json_u"]))
        out.append({"as_is": ch, "upper": ch.upper(), "percent": "%%%02X" % ord(ch), "entity": "&#%d;" % ord(ch),
                    "hex_entity": "&#x%x;" % ord(ch), "json_u": "\\u%04x" % ord(ch),
                    "fullwidth": chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch}[form])
        if i < len(secret) - 1:
            out.append(draw(_SEPARATORS))
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(before=_CONTEXT, disguised=_disguised(SECRET), after=_CONTEXT)
def test_a_disguised_secret_is_replaced_and_nothing_around_it(before, disguised, after):
    assert secret_matcher([SECRET]).sub(before + disguised + after, REDACTED) == before + REDACTED + after


@settings(max_examples=300, deadline=None)
@given(text=st.text(), decode=st.booleans())
def test_every_folded_character_maps_back_to_the_characters_it_came_from(text, decode):
    view = FoldedView(text, decode=decode)
    starts, ends = view.origins()
    assert len(starts) == len(ends) == len(view.folded)
    spans = sorted(set(zip(starts, ends)))
    assert "".join(FoldedView(text[a:b], decode=decode).folded for a, b in spans) == view.folded
