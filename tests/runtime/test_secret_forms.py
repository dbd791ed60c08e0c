"""Encoded secrets are found and redacted in every form (issue 11 item 5)."""
from __future__ import annotations

import base64
import json

import pytest

from toolops.runtime.secret_forms import base64_cores, encoded_variants, secrets_pattern
from toolops.runtime.tool_messages import REDACTED, ResultPolicy, ToolResult, encode_result, redact

SECRET = "demo-cal-Zq8_xK2pLm9vT4wR"


@pytest.mark.parametrize("form", sorted(encoded_variants(SECRET)))
def test_it_finds_each_whole_value_encoding(form):
    text = f"before {encoded_variants(SECRET)[form]} after"
    assert secrets_pattern([SECRET]).search(text), form


@pytest.mark.parametrize("prefix", ["", "B", "Be", "Bearer ", '{"auth":"', "xx:"])
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
def test_it_finds_base64_of_the_secret_inside_a_longer_blob_at_every_offset(prefix, encode):
    blob = encode((prefix + SECRET + '", "more": 1}').encode()).decode()
    redacted = secrets_pattern([SECRET]).sub(REDACTED, blob)
    assert REDACTED in redacted
    # No offset's secret-only characters are left anywhere in the blob.
    assert not any(core in redacted for core in base64_cores(SECRET.encode()))


def test_it_finds_mixed_percent_json_and_case_forms():
    mixed = "".join(("%%%02x" % ord(c)) if i % 3 == 0 else ("\\u%04X" % ord(c) if i % 3 == 1 else c.upper())
                    for i, c in enumerate(SECRET))
    assert secrets_pattern([SECRET]).fullmatch(mixed)


def test_it_leaves_innocent_text_alone():
    pattern = secrets_pattern([SECRET])
    text = "The harbour wakes before the city does. " + base64.b64encode(b"nothing secret here at all").decode()
    assert pattern.sub(REDACTED, text) == text
    # Very short secrets get no encoded forms (their base64 core would be common letters).
    assert secrets_pattern(["abc"]).pattern.count("|") < 10


def test_it_redacts_results_and_records_in_every_encoding():
    policy = ResultPolicy(max_bytes=4096, secrets=(SECRET,))
    echoed = {name: f"x{value}y" for name, value in encoded_variants(SECRET).items()}
    encoded = encode_result(ToolResult(status="ok", value=echoed), policy=policy, invocation_id="i", tool_ref="t@1")
    text = encoded.payload_bytes.decode()
    for value in encoded_variants(SECRET).values():
        assert value not in text
    assert encoded.payload["redactions"] >= len(echoed)
    assert all(SECRET.lower() not in json.dumps(v).lower() for v in redact(echoed, policy=policy).values())
