"""Every form a credential can take on its way back from a hostile remote (docs/concepts/results.md, issue 11).

A tool that echoes its ``Authorization`` header back rarely echoes it verbatim: it shows up
base64'd inside a longer blob, hex-dumped, upper-cased, percent-encoded or as JSON ``\\uXXXX``
escapes. ``secrets_pattern(secrets)`` compiles one regex that finds each secret in all of these:

* **character-wise forms** — per character: itself (any case), a JSON ``\\u00XX`` escape or a
  percent-encoded UTF-8 byte (``%4A``/``%4a``) — so literal, upper/lower/mixed case, fully or
  partly percent-encoded and ``\\u``-escaped text all match, in any mix;
* **hex** of the UTF-8 bytes (either case);
* **base64**, standard and URL-safe alphabets, with or without padding, *at each of the three
  byte offsets*: a secret inside a longer value (``"Bearer " + secret``, a JSON blob) is encoded
  at offset ``len(prefix) % 3``, which changes every character. For each offset the pattern
  holds the characters that depend only on the secret's bytes, so the secret is found inside
  any surrounding base64 text. (A handful of edge characters, which carry a few bits mixed
  with neighbouring bytes, are left — they cannot reveal the secret.)

Encoded forms are used only for secrets of at least ``MIN_ENCODED_LENGTH`` bytes: a shorter
one would make its base64 core a few common characters and redact innocent text. Stdlib only.
"""
from __future__ import annotations

import base64
import functools
import re
import urllib.parse
from typing import Iterable

MIN_ENCODED_LENGTH = 6


def _char_form(ch: str) -> str:
    forms = [re.escape(ch)]
    code = ord(ch)
    if code <= 0xFFFF:
        forms.append(r"\\u%04x" % code)
    forms.append("".join("%%%02x" % b for b in ch.encode("utf-8")))
    return "(?:" + "|".join(forms) + ")"


def base64_cores(secret: bytes) -> list[str]:
    """The base64 characters that depend only on ``secret``'s bytes, at offsets 0, 1 and 2."""
    cores = []
    n = len(secret)
    for offset in range(3):
        start, end = -(-8 * offset // 6), (8 * offset + 8 * n) // 6  # chars fully inside the secret's bits
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            core = encode(bytes(offset) + secret).decode("ascii")[start:end]
            if core:
                cores.append(core)
    return cores


def secret_forms(secret: str) -> tuple[str, list[str]]:
    """(case-insensitive regex source, case-sensitive literal forms) for one secret."""
    raw = secret.encode("utf-8")
    insensitive = ["".join(_char_form(ch) for ch in secret)]
    sensitive: list[str] = []
    if len(raw) >= MIN_ENCODED_LENGTH:
        insensitive.append(re.escape(raw.hex()))
        sensitive = base64_cores(raw)
    return "|".join(insensitive), sensitive


@functools.lru_cache(maxsize=64)
def _compiled(secrets: tuple[str, ...]) -> re.Pattern | None:
    insensitive, sensitive = [], set()
    for secret in secrets:
        ci, cs = secret_forms(secret)
        insensitive.append(ci)
        sensitive.update(cs)
    if not insensitive:
        return None
    parts = ["(?i:" + "|".join(insensitive) + ")"]
    parts += [re.escape(s) for s in sorted(sensitive, key=lambda s: (-len(s), s))]
    return re.compile("|".join(parts))


def secrets_pattern(secrets: Iterable[str]) -> re.Pattern | None:
    """One compiled pattern for every form of every (non-empty) secret; None without secrets."""
    # Longest first: a secret that contains another is removed whole, not around the shorter one.
    return _compiled(tuple(sorted({s for s in secrets if isinstance(s, str) and s}, key=lambda s: (-len(s), s))))


def encoded_variants(secret: str) -> dict[str, str]:
    """Whole-value encodings of ``secret`` (what a test greps a database dump or a log for)."""
    raw = secret.encode("utf-8")
    return {
        "literal": secret,
        "upper": secret.upper(),
        "lower": secret.lower(),
        "base64": base64.b64encode(raw).decode(),
        "base64_nopad": base64.b64encode(raw).decode().rstrip("="),
        "base64url": base64.urlsafe_b64encode(raw).decode(),
        "base64url_nopad": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "base64_offset1": base64_cores(raw)[2],
        "base64_offset2": base64_cores(raw)[4],
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "percent": "".join("%%%02X" % b for b in raw),
        "percent_lower": "".join("%%%02x" % b for b in raw),
        "json_u": "".join("\\u%04x" % ord(c) for c in secret),
        "urlquote": urllib.parse.quote(secret, safe=""),
    }
