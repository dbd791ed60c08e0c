"""Which person a declared name means, compared as a reader sees it (UTS #39 skeletons).

An agent declares the person a run acts for (``on_behalf_of``) as text, and separation of duties
keeps that person from approving the run's calls. Compared as strings, ``bob\\u200b`` (a zero-width
space), ``bоb`` (Cyrillic о), ``ＢＯＢ`` (fullwidth) and ``bob`` are four people, and the real bob
could approve his own run. ``person_key`` reduces a name to what a person reading it sees:

1. **Refuse** text a reader cannot see: default-ignorable code points (zero-width spaces and
   joiners, variation selectors, bidi controls, fillers) and every other control, format,
   private-use, surrogate or unassigned character (``InvisibleCharacter``). They are refused,
   not dropped: a name that hides characters is not a name anyone typed at a sign-in page.
2. **NFKC**: compatibility forms become plain ones (fullwidth, ligatures, mathematical letters).
3. **Case-fold** (then NFKC again, as Unicode's NFKC_Casefold does): names are case-insensitive.
4. **Skeleton** (UTS #39 "confusable" skeletons, from ICU's ``SpoofChecker``, the reference
   implementation, through PyICU): each character becomes its prototype (Cyrillic о → o,
   1 → l, m → rn). Folding comes first, as UTS #39 asks for case-insensitive names; so ``aIice``
   (capital i) folds to ``aiice``, not ``alice`` — which is safe here, because a name that
   resolves to nobody is refused, never accepted as "someone else".

Two names with the same key look the same to a reader: to separation of duties they are the
same person. A key is for comparing, never for display. Pure: no I/O, no Django.
"""
from __future__ import annotations

import unicodedata

import icu

# Control, format, surrogate, private use, unassigned: nothing a person reads as part of a name.
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn"}
_SPOOF_CHECKER = icu.SpoofChecker()  # getSkeleton only reads its (immutable) confusables data


class InvisibleCharacter(ValueError):
    """The name holds a character a reader cannot see; ``character`` names it (``U+200B ZERO WIDTH SPACE``)."""

    def __init__(self, character: str):
        self.character = f"U+{ord(character):04X} {unicodedata.name(character, 'unnamed character')}"
        super().__init__(f"an invisible or control character ({self.character})")


def hidden_character(name: str) -> str | None:
    """The first character of ``name`` a reader cannot see, or None."""
    for char in name:
        if unicodedata.category(char) in _HIDDEN_CATEGORIES or icu.Char.hasBinaryProperty(
                char, icu.UProperty.DEFAULT_IGNORABLE_CODE_POINT):
            return char
    return None


def person_key(name: str) -> str:
    """``name`` as a reader sees it (see the module docstring); raises ``InvisibleCharacter``."""
    hidden = hidden_character(name)
    if hidden is not None:
        raise InvisibleCharacter(hidden)
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name.strip()).casefold())
    return _SPOOF_CHECKER.getSkeleton(0, folded)


def person_key_lenient(name: str) -> str:
    """``person_key`` with hidden characters dropped instead of refused: for text stored before
    names were checked, compared once more at decision time (never to accept a new name)."""
    return person_key("".join(c for c in name if hidden_character(c) is None))
