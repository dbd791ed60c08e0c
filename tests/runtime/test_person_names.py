"""Names as a reader sees them (no database): NFKC, case-folded, UTS #39 skeleton; hidden characters refused."""
from __future__ import annotations

import pytest

from toolops.runtime.person_names import InvisibleCharacter, person_key, person_key_lenient


@pytest.mark.parametrize("name", ["bob", "BOB", " Bob ", "bоb", "ｂｏｂ", "𝐛𝐨𝐛", "b\u03bfb"],
                         ids=["plain", "upper", "spaces", "cyrillic-o", "fullwidth", "math-bold", "greek-omicron"])
def test_it_reads_look_alikes_of_bob_as_bob(name):
    assert person_key(name) == person_key("bob")


@pytest.mark.parametrize("name", ["rob", "bobby", "user:bob", "b.ob"])
def test_it_keeps_different_names_apart(name):
    assert person_key(name) != person_key("bob")


def test_it_folds_case_before_the_skeleton_as_uts39_asks_for_case_insensitive_names():
    assert person_key("ALICE") == person_key("alice") == person_key("Alice")
    assert person_key("Straße") == person_key("STRASSE")


@pytest.mark.parametrize("name, named", [
    ("bob\u200b", "U+200B ZERO WIDTH SPACE"), ("b\u200dob", "U+200D ZERO WIDTH JOINER"),
    ("bo\ufe0fb", "U+FE0F VARIATION SELECTOR-16"), ("\u3164bob", "U+3164 HANGUL FILLER"),
    ("bob\u202e", "U+202E RIGHT-TO-LEFT OVERRIDE"), ("b\x07ob", "U+0007 unnamed character"),
    ("b\ue000ob", "U+E000 unnamed character"),
])
def test_it_refuses_a_character_a_reader_cannot_see_and_names_it(name, named):
    with pytest.raises(InvisibleCharacter) as refused:
        person_key(name)
    assert refused.value.character == named


def test_the_lenient_key_drops_hidden_characters_for_text_stored_before_names_were_checked():
    assert person_key_lenient("b\u200bоb\u200d") == person_key("bob")
