"""Finding a configured credential in the forms a hostile remote echoes it in (issues 11, 29).

``secret_matcher(secrets)`` builds, once per set of secrets, a ``SecretMatcher`` that says where
in a text each secret occurs (spans of the original text, to be replaced). docs/redaction.md
states what is covered and what is not; in short:

**A secret of at least MIN_FUZZY_LENGTH characters once folded** (any real credential) is
looked for in a *folded view* of the text, where every character is

* decoded when written as an escape — ``%XX`` (UTF-8), ``&#NN;`` / ``&#xHH;`` (leading zeros,
  with or without ``;``), named HTML entities, ``\\uXXXX`` (surrogate pairs too), ``\\xHH``;
* folded as a reader sees it (``text_fold``: NFKC, so ``ｈｓｔ`` is ``hst``; then case);
* dropped when it is a separator: whitespace, control, zero-width and other invisible
  characters, and ``SEPARATOR_PUNCTUATION``.

Every folded character remembers the span of original characters it came from, so a match is
replaced in the original text, separators inside it included. The view is also taken without
decoding, so an escape-like prefix (``&#x`` before a secret that starts with hex digits) cannot
swallow the secret's first characters.

In that view the matcher looks for the secret's *forms*, folded the same way: the secret
itself; base64 (standard and URL-safe) at each of the three byte alignments and base32 at each
of its five — only the characters that depend on the secret's bytes alone, so the secret is
found inside a longer blob, padded or not; hex; and one level of nesting: base64, base32 and
hex of any of the secret's base64, base32, hex, ``%XX``, HTML-entity and ``\\u`` forms. (A
nested ``%XX``, HTML entity or ``\\u`` escape is decoded by the view itself.)

The search is cheap when nothing is there, the common case: every form is at least ``L``
folded characters long, so sampling the view every ``L - Q + 1`` positions and looking each
``Q``-character sample up in a set of the forms' ``Q``-grams cannot step over an occurrence
(``_FormIndex``); a sample found is checked against the forms it stands in.

**A shorter secret** is matched as written only: character by character in any case, as
``\\u00XX``, ``%XX`` or an HTML numeric entity, and — from MIN_ENCODED_LENGTH bytes — as hex,
base64 or base32; never with separators inside or nested. Spread over spaces, a short secret
would be found in ordinary text.

``spans_in(texts, chains)`` also reads chains of strings as one text (adjacent fields of one
JSON object or array), so a credential split across them is found too. Stdlib only.
"""
from __future__ import annotations

import base64
import bisect
import functools
import html
import re
import urllib.parse
from typing import Iterable, Sequence

from toolops.runtime.text_fold import fold, is_blank

MIN_ENCODED_LENGTH = 6  # bytes: below this a secret's base64 core is a few common characters
MIN_FUZZY_LENGTH = 12  # folded characters: below this separators and nesting are not undone
SEPARATOR_PUNCTUATION = "-_.,:;|/\\'\"`+*~="
_GRAM = 8  # characters per sample (Q)
_FOLD_TABLE_LIMIT = 1 << 16  # distinct characters remembered; past this each is folded afresh


# --- the folded view ------------------------------------------------------------------------


def _is_separator(ch: str) -> bool:
    return ch in SEPARATOR_PUNCTUATION or is_blank(ch)


class _FoldTable(dict):
    """A ``str.translate`` table: code point → its folded characters, or None for a separator.
    Filled on first sight; ASCII folds to one ASCII character or None, which keeps
    ``translate`` on its fast path for ASCII text."""

    def __missing__(self, code: int) -> str | None:
        ch = chr(code)
        value = None if _is_separator(ch) else ("".join(c for c in fold(ch) if not _is_separator(c)) or None)
        if len(self) < _FOLD_TABLE_LIMIT:
            self[code] = value
        return value


_FOLD = _FoldTable()
# Runs of ASCII characters that are kept (each folds to exactly one character).
_ASCII_KEPT = re.compile("[" + re.escape("".join(chr(c) for c in range(128) if _FOLD[c])) + "]+")

_ESCAPE = re.compile(
    r"%(?:[0-7][0-9a-f]|[cd][0-9a-f]%[89ab][0-9a-f]|e[0-9a-f](?:%[89ab][0-9a-f]){2}|f[0-4](?:%[89ab][0-9a-f]){3})"
    r"|&#(?:x[0-9a-f]{1,6}|[0-9]{1,7});?|&[a-z][a-z0-9]{1,31};?"
    r"|\\u(?:d[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}|[0-9a-f]{4})|\\x[0-9a-f]{2}",
    re.IGNORECASE,
)
_ESCAPE_STARTS = ("%", "&", "\\")


@functools.lru_cache(maxsize=4096)
def _decoded(token: str) -> str:
    """One escape (an ``_ESCAPE`` match) as the character(s) it stands for."""
    if token[0] == "%":
        return bytes.fromhex(token.replace("%", "")).decode("utf-8", "replace")
    if token[0] == "&":
        return html.unescape(token)
    if token[1] in "xX":
        return chr(int(token[2:], 16))
    units = [int(token[i + 2:i + 6], 16) for i in range(0, len(token), 6)]
    if len(units) == 2:
        return chr(0x10000 + ((units[0] - 0xD800) << 10) + (units[1] - 0xDC00))
    return "\ufffd" if 0xD800 <= units[0] <= 0xDFFF else chr(units[0])


def _decode_match(m: re.Match) -> str:
    return _decoded(m.group(0))


_NON_ASCII = re.compile("([^\x00-\x7f]+)")


def folded(text: str) -> str:
    """``text`` folded, separators dropped, escapes left as written. ``str.translate`` is fast
    on ASCII only, so the ASCII runs of a mostly-ASCII text (curly quotes, a dash) are
    translated apart from the rest."""
    if text.isascii():
        return text.translate(_FOLD)
    return "".join(part.translate(_FOLD) for part in _NON_ASCII.split(text))


class FoldedView:
    """One folded view of ``text`` (escapes decoded when ``decode``) and, built only when asked
    (a match was found), the span of original characters each folded character came from."""

    def __init__(self, text: str, *, decode: bool) -> None:
        self.text, self.decode = text, decode
        self.folded = folded(_ESCAPE.sub(_decode_match, text) if decode else text)
        self._origins: tuple[list[int], list[int]] | None = None

    def origins(self) -> tuple[list[int], list[int]]:
        """(start, end) in ``text`` of each character of ``folded``: the same decoding and
        folding as above, one piece at a time."""
        if self._origins is not None:
            return self._origins
        starts: list[int] = []
        ends: list[int] = []

        def add(chars: str, start: int, end: int) -> None:
            for ch in chars:
                out = _FOLD[ord(ch)]
                if out:
                    starts.extend([start] * len(out))
                    ends.extend([end] * len(out))

        def add_ascii(lo: int, hi: int) -> None:  # one folded character per kept one: whole runs at once
            for run in _ASCII_KEPT.finditer(text, lo, hi):
                starts.extend(range(run.start(), run.end()))
                ends.extend(range(run.start() + 1, run.end() + 1))

        def add_plain(lo: int, hi: int) -> None:
            for run in _NON_ASCII.finditer(text, lo, hi):
                add_ascii(lo, run.start())
                for i in range(run.start(), run.end()):
                    add(text[i], i, i + 1)
                lo = run.end()
            add_ascii(lo, hi)

        text, kept = self.text, 0
        for m in _ESCAPE.finditer(text) if self.decode else ():
            add_plain(kept, m.start())
            add(_decoded(m.group(0)), m.start(), m.end())
            kept = m.end()
        add_plain(kept, len(text))
        self._origins = starts, ends
        return self._origins


# --- the forms of a secret --------------------------------------------------------------------


def _cores(secret: bytes, encode, *, block: int, bits: int) -> list[str]:
    """The characters of ``encode(pad + secret)`` that depend only on ``secret``'s bytes, at
    each alignment (``block`` bytes per encoded group, ``bits`` per character)."""
    cores = []
    for offset in range(block):
        start, end = -(-8 * offset // bits), (8 * offset + 8 * len(secret)) // bits
        core = encode(bytes(offset) + secret).decode("ascii")[start:end]
        if core:
            cores.append(core)
    return cores


def base64_cores(secret: bytes) -> list[str]:
    """Base64 (standard, URL-safe) characters that depend only on ``secret``, at offsets 0, 1 and 2."""
    return [core for offset_cores in zip(_cores(secret, base64.b64encode, block=3, bits=6),
                                             _cores(secret, base64.urlsafe_b64encode, block=3, bits=6))
            for core in offset_cores]


def base32_cores(secret: bytes) -> list[str]:
    """Base32 characters that depend only on ``secret``, at offsets 0 to 4."""
    return _cores(secret, base64.b32encode, block=5, bits=5)


def _encodings(raw: bytes) -> list[str]:
    return [*base64_cores(raw), *base32_cores(raw), raw.hex()]


def _escaped(secret: str) -> list[str]:
    """The secret once encoded as text a remote may encode again."""
    raw = secret.encode("utf-8")
    utf16 = secret.encode("utf-16-be")
    return [
        *base64_cores(raw), *base32_cores(raw), raw.hex(), raw.hex().upper(),
        "".join("%%%02X" % b for b in raw), "".join("%%%02x" % b for b in raw),
        "".join("&#%d;" % ord(c) for c in secret), "".join("&#x%x;" % ord(c) for c in secret),
        "".join("\\u%02x%02x" % (utf16[i], utf16[i + 1]) for i in range(0, len(utf16), 2)),
    ]


def fuzzy_forms(secret: str) -> set[str]:
    """Every form of ``secret`` the folded view is searched for, folded."""
    forms = {secret, *_encodings(secret.encode("utf-8"))}
    for inner in _escaped(secret):
        forms.update(_encodings(inner.encode("ascii")))
    return {f for f in map(folded, forms) if len(f) >= MIN_FUZZY_LENGTH}


class _FormIndex:
    """The ``Q``-grams a sample can meet first in an occurrence of a form, with the forms (and
    offsets) they stand at. A text is sampled every ``step`` positions, ``step`` being at most
    the shortest form's length less ``Q`` plus one, so the first sample inside any occurrence
    lies at an offset below ``step`` and still leaves ``Q`` characters of the form: indexing
    those offsets only is enough, and keeps the index small (a few thousand grams per secret)."""

    def __init__(self, forms: Iterable[str]) -> None:
        self.forms = sorted(forms)
        shortest = min(map(len, self.forms))
        self.gram = min(_GRAM, shortest)
        self.step = shortest - self.gram + 1
        self.index: dict[str, list[tuple[int, int]]] = {}
        for n, form in enumerate(self.forms):
            for offset in range(self.step):
                self.index.setdefault(form[offset:offset + self.gram], []).append((n, offset))

    def find(self, view: str) -> list[tuple[int, int]]:
        """Spans in ``view`` of every occurrence of every form."""
        q, index = self.gram, self.index
        samples = [i for i in range(0, len(view) - q + 1, self.step) if view[i:i + q] in index]
        found = set()
        for i in samples:
            for n, offset in index[view[i:i + q]]:
                start, form = i - offset, self.forms[n]
                if start >= 0 and view.startswith(form, start):
                    found.add((start, start + len(form)))
        return sorted(found)


def _char_form(ch: str) -> str:
    code = ord(ch)
    forms = [re.escape(ch), "&#0*%d;?" % code, "&#x0*%x;?" % code]
    if code <= 0xFFFF:
        forms.append(r"\\u%04x" % code)
    forms.append("".join("%%%02x" % b for b in ch.encode("utf-8")))
    return "(?:" + "|".join(forms) + ")"


def _exact_pattern(secrets: Sequence[str]) -> re.Pattern:
    """Short secrets as written: character by character (any case, escapes), and from
    MIN_ENCODED_LENGTH bytes as hex, base32 (any case) and base64."""
    insensitive, sensitive = [], set()
    for secret in secrets:
        raw = secret.encode("utf-8")
        insensitive.append("".join(_char_form(ch) for ch in secret))
        if len(raw) >= MIN_ENCODED_LENGTH:
            insensitive += [re.escape(raw.hex()), *map(re.escape, base32_cores(raw))]
            sensitive.update(base64_cores(raw))
    parts = ["(?i:" + "|".join(insensitive) + ")"]
    parts += [re.escape(s) for s in sorted(sensitive, key=lambda s: (-len(s), s))]
    return re.compile("|".join(parts))


# --- the matcher ------------------------------------------------------------------------------


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans, overlapping ones made one (touching ones stay two: two secrets, two markers)."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def replace_spans(text: str, spans: Sequence[tuple[int, int]], marker: str) -> str:
    """``text`` with each of the (merged, sorted) ``spans`` replaced by ``marker``."""
    pieces, kept = [], 0
    for start, end in spans:
        pieces += [text[kept:start], marker]
        kept = end
    return "".join(pieces) + text[kept:]


class SecretMatcher:
    """Where the configured secrets occur in a text; see the module docstring."""

    def __init__(self, secrets: Sequence[str]) -> None:
        fuzzy = [s for s in secrets if len(folded(s)) >= MIN_FUZZY_LENGTH]
        exact = [s for s in secrets if s not in fuzzy]
        forms = set().union(*map(fuzzy_forms, fuzzy))
        self._index = _FormIndex(forms) if forms else None
        self._exact = _exact_pattern(exact) if exact else None

    def spans_in(self, texts: Sequence[str], chains: Sequence[Sequence[int]], *,
                 first: bool = False) -> list[list[tuple[int, int]]]:
        """For each of ``texts``, the merged spans that hold a secret or part of one. The texts
        of each chain (indexes into ``texts``; every text in at least one) are also read as
        one text, so a secret split across them is found in each part. Each text is folded
        once per view, whatever the number of chains it is in. With ``first``: stop at the
        first span found."""
        found: list[list[tuple[int, int]]] = [[] for _ in texts]
        if self._exact is not None:
            for i, text in enumerate(texts):
                for m in self._exact.finditer(text):
                    found[i].append(m.span())
                    if first:
                        return found
        if self._index is not None:
            raw = [FoldedView(text, decode=False) for text in texts]
            decoded = [FoldedView(text, decode=True) if any(c in text for c in _ESCAPE_STARTS) else None
                       for text in texts]
            for chain in chains:
                views = [[raw[i] for i in chain]]
                if any(decoded[i] is not None for i in chain):
                    views.append([decoded[i] or raw[i] for i in chain])
                for pieces in views:
                    for i, span in self._find_across(chain, pieces):
                        found[i].append(span)
                        if first:
                            return found
        return [merge_spans(spans) for spans in found]

    def _find_across(self, chain: Sequence[int], views: Sequence[FoldedView]):
        """(text index, original span) for every part of every form found in the views read as one."""
        joined = "".join(view.folded for view in views)
        hits = self._index.find(joined)
        if not hits:
            return
        offsets = [0]
        for view in views:
            offsets.append(offsets[-1] + len(view.folded))
        for start, end in hits:
            for n in range(bisect.bisect_right(offsets, start) - 1, len(views)):
                if offsets[n] >= end:
                    break
                lo, hi = max(start, offsets[n]) - offsets[n], min(end, offsets[n + 1]) - offsets[n]
                if lo < hi:
                    starts, ends = views[n].origins()
                    yield chain[n], (starts[lo], ends[hi - 1])

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The merged spans of ``text`` that hold a secret."""
        return self.spans_in([text], [[0]])[0]

    def search(self, text: str) -> bool:
        return bool(self.spans_in([text], [[0]], first=True)[0])

    def sub(self, text: str, marker: str) -> str:
        """``text`` with every secret replaced by ``marker``."""
        return replace_spans(text, self.spans(text), marker)


@functools.lru_cache(maxsize=64)
def _matcher(secrets: tuple[str, ...]) -> SecretMatcher | None:
    return SecretMatcher(secrets) if secrets else None


def secret_matcher(secrets: Iterable[str]) -> SecretMatcher | None:
    """The matcher for every (non-empty) secret, built once per set; None without secrets."""
    return _matcher(tuple(sorted({s for s in secrets if isinstance(s, str) and s})))


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
