"""Text as a reader sees it, for matching what a hostile remote disguises (issue 29).

A person or a model reads ``ｈｓｔ`` as ``hst``, ``Hst`` as ``hst`` and does not see a
zero-width space at all. ``fold`` gives a character's folded form (NFKC — fullwidth and other
compatibility forms, ligatures — then case folding), and ``is_blank`` says whether it shows as
nothing or as space: whitespace, control characters and the invisible ones (``INVISIBLE``).

Both work one character at a time, so a caller can keep an index from each folded character
back to the character it came from. Stdlib only.
"""
from __future__ import annotations

import functools
import unicodedata

# Unicode's Default_Ignorable_Code_Point characters that are not format characters (category Cf,
# which ``is_blank`` takes by category: zero-width space and joiners, word joiner, BOM, soft
# hyphen, bidi controls, tag characters): the combining grapheme joiner, Hangul fillers, Khmer
# inherent vowels, Mongolian and other variation selectors.
INVISIBLE_RANGES = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xE0100, 0xE01EF),
)


@functools.lru_cache(maxsize=4096)
def is_blank(ch: str) -> bool:
    """Whitespace, a control character, or a character that renders as nothing."""
    if ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf"):
        return True
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in INVISIBLE_RANGES)


@functools.lru_cache(maxsize=4096)
def fold(ch: str) -> str:
    """One character's folded form (NFKC, then case folded); may be longer than one character."""
    return unicodedata.normalize("NFKC", ch).casefold()
