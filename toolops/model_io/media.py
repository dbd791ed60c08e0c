"""Text or bytes? How a response body reaches the model (docs/concepts/results.md: binary results are references).

A body is text only when its media type says so (``text/*``, JSON, XML, and the like — or no
type at all) *and* it decodes strictly in its declared charset (UTF-8 when none is named)
without a NUL character. Anything else is bytes: it is never decoded with replacement
characters (a PNG would come back as U+FFFD soup, and a NUL cannot even be stored in
PostgreSQL's jsonb). Pure; stdlib only.
"""
from __future__ import annotations

import codecs
import hashlib
from dataclasses import dataclass, field

OCTET_STREAM = "application/octet-stream"
_TEXT_SUBTYPES = frozenset({
    "json", "xml", "javascript", "ecmascript", "x-www-form-urlencoded", "yaml", "x-yaml", "toml", "csv",
    "x-ndjson", "ndjson", "graphql", "sql", "markdown",
})


@dataclass(frozen=True)
class BinaryBody:
    """A response body kept as bytes: its media type, the bytes, and whether reading stopped
    at the size cap (then ``data`` is only the first bytes)."""

    media_type: str
    data: bytes = field(repr=False)
    truncated: bool = False

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def media_type(content_type: str | None) -> str:
    """``type/subtype`` in lower case, without parameters; ``""`` when absent or malformed."""
    essence = (content_type or "").split(";", 1)[0].strip().lower()
    kind, slash, sub = essence.partition("/")
    return essence if slash and kind and sub and " " not in essence else ""


def _charset(content_type: str | None) -> str:
    for param in (content_type or "").split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            try:
                return codecs.lookup(value.strip().strip('"')).name
            except LookupError:
                return ""  # a charset we do not know: not decodable as text
    return "utf-8"


def textual(mtype: str) -> bool:
    if not mtype:
        return True  # no type: decide by decoding
    kind, _, sub = mtype.partition("/")
    return kind == "text" or sub in _TEXT_SUBTYPES or sub.endswith(("+json", "+xml"))


def decode_text(content_type: str | None, body: bytes, *, truncated: bool = False) -> str | None:
    """The body as text, or None when it is bytes (see the module docstring). A body cut at
    the size cap may end inside a character: only that incomplete tail is dropped."""
    if not textual(media_type(content_type)):
        return None
    charset = _charset(content_type)
    if not charset:
        return None
    try:
        decoder = codecs.getincrementaldecoder(charset)(errors="strict")
        text = decoder.decode(body, final=not truncated)
    except (UnicodeDecodeError, LookupError):
        return None
    return None if "\x00" in text else text


def binary_body(content_type: str | None, body: bytes, *, truncated: bool = False) -> BinaryBody:
    return BinaryBody(media_type=media_type(content_type) or OCTET_STREAM, data=body, truncated=truncated)


def holds_nul(value) -> bool:
    """True when a parsed JSON value has U+0000 in a string or key: PostgreSQL's jsonb cannot
    store it, so such a body is kept as its JSON text instead (where the NUL stays escaped)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_nul(v) for v in value)
    return False
