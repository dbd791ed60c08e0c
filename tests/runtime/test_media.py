"""Text or bytes (docs/concepts/results.md): a body is text only when its type says so and it decodes strictly."""
from __future__ import annotations

import pytest

from toolops.model_io.media import OCTET_STREAM, binary_body, decode_text, media_type

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10"


@pytest.mark.parametrize("content_type, body, text", [
    ("text/html; charset=utf-8", "带护照 ✓".encode(), "带护照 ✓"),
    ("text/plain; charset=ISO-8859-1", "café".encode("latin-1"), "café"),
    ("application/problem+json", b'{"a": 1}', '{"a": 1}'),
    ("application/xml", b"<a/>", "<a/>"),
    (None, b"plain words", "plain words"),
])
def test_it_decodes_text_in_its_declared_charset(content_type, body, text):
    assert decode_text(content_type, body) == text


@pytest.mark.parametrize("content_type, body", [
    ("image/png", PNG),  # a binary type is never decoded, whatever its bytes
    ("application/octet-stream", b"looks like text"),
    ("text/html", PNG),  # claims text but is not UTF-8: bytes, not U+FFFD soup
    ("text/plain", b"nul\x00inside"),  # a NUL cannot be stored in jsonb and is no text anyway
    (None, b"\xff\xfe\x00\x01"),
    ("text/plain; charset=x-no-such-charset", b"abc"),
])
def test_it_keeps_bytes_as_bytes(content_type, body):
    assert decode_text(content_type, body) is None


def test_a_body_cut_at_the_cap_loses_only_its_incomplete_last_character():
    body = "ab带".encode()[:-1]
    assert decode_text("text/plain", body, truncated=True) == "ab"
    assert decode_text("text/plain", body, truncated=False) is None


def test_a_binary_body_knows_its_type_size_and_digest():
    import hashlib

    b = binary_body("IMAGE/PNG; x=1", PNG)
    assert (b.media_type, b.size, b.sha256) == ("image/png", len(PNG), hashlib.sha256(PNG).hexdigest())
    assert binary_body("garbage", b"x").media_type == OCTET_STREAM
    assert media_type("text/html ; charset=utf-8") == "text/html" and media_type("no slash") == ""
