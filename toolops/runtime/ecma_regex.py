"""ECMA-262 regular expressions (what JSON Schema's ``pattern`` means) run on the ``regex`` package.

JSON Schema defines ``pattern``, ``patternProperties`` and the ``regex`` format as ECMA-262
regular expressions with Unicode semantics (the ``u`` flag). Python's ``re`` differs in ways a
schema author can hit: no ``\\p{…}`` property escapes, Unicode ``\\d``/``\\w``, a ``\\s`` without
U+FEFF, ``$`` matching before a trailing newline, ``.`` matching U+2028. :func:`translate`
rewrites an ECMA-262 pattern into the syntax of the ``regex`` package with ECMA meaning:

* ``\\d \\w \\s \\b`` (and their negations) become explicit ASCII / ECMA-whitespace classes;
* ``.`` excludes the four ECMA line terminators; ``$`` is end of input only;
* ``\\cX``, ``\\uXXXX``, ``\\u{…}``, ``(?<name>…)``, ``\\k<name>``, ``[]`` and ``[^]`` are mapped;
* ``\\p{…}`` / ``\\P{…}`` pass through to ``regex``, which knows the Unicode properties;
* Python-only syntax (``(?P<…>``, ``(?#…)``, inline flags, possessive quantifiers) is an error.

Two strictness levels. ``strict=True`` is the ``u``-mode grammar (identity escapes only for
syntax characters, no lone ``{ } ]``): the ``regex`` format asserts it. ``strict=False`` also
accepts Annex B's harmless leniencies seen in real schemas (``\\_``, ``\\-``, a literal ``{``) —
what ``pattern`` compiles — but never an unknown *letter* escape, whose meaning differs between
engines (``\\a`` is BEL in Python and ``a`` in Annex B).
"""
from __future__ import annotations

import functools

import regex

__all__ = ["EcmaRegexError", "compile_pattern", "is_ecma_regex", "translate"]


class EcmaRegexError(ValueError):
    """The pattern is not an ECMA-262 regular expression ToolOps can run."""


_SYNTAX_CHARS = frozenset("^$\\.*+?()[]{}|/")
_MAX_CODE_POINT = 0x10FFFF

# Code point ranges of the ECMA class escapes (ECMA-262 §22.2.2.9, CharacterClassEscape).
_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
# WhiteSpace (TAB VT FF SP NBSP ZWNBSP + Zs) and LineTerminator (LF CR LS PS): §12.2, §12.3.
_SPACE = (
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
)
_LINE_TERMINATORS = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out, start = [], 0
    for lo, hi in sorted(ranges):
        if lo > start:
            out.append((start, lo - 1))
        start = max(start, hi + 1)
    if start <= _MAX_CODE_POINT:
        out.append((start, _MAX_CODE_POINT))
    return tuple(out)


_CLASS_ESCAPES = {
    "d": _DIGIT, "D": _complement(_DIGIT),
    "w": _WORD, "W": _complement(_WORD),
    "s": _SPACE, "S": _complement(_SPACE),
}
_CONTROL_ESCAPES = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}


def _cp(code: int) -> str:
    """A code point as an escape ``regex`` reads the same inside and outside a class."""
    return f"\\U{code:08x}"


def _ranges_body(ranges) -> str:
    return "".join(_cp(lo) if lo == hi else f"{_cp(lo)}-{_cp(hi)}" for lo, hi in ranges)


_WORD_CLASS = f"[{_ranges_body(_WORD)}]"
_WORD_BOUNDARY = f"(?:(?<={_WORD_CLASS})(?!{_WORD_CLASS})|(?<!{_WORD_CLASS})(?={_WORD_CLASS}))"
_NOT_WORD_BOUNDARY = f"(?:(?<={_WORD_CLASS})(?={_WORD_CLASS})|(?<!{_WORD_CLASS})(?!{_WORD_CLASS}))"
_DOT = f"[^{_ranges_body(_LINE_TERMINATORS)}]"


class _Translator:
    """One left-to-right pass over the ECMA-262 Pattern grammar (§22.2.1), emitting ``regex``."""

    def __init__(self, source: str, strict: bool) -> None:
        self.src = source
        self.strict = strict
        self.i = 0
        self.out: list[str] = []
        self.groups = 0
        self.names: set[str] = set()
        self.backrefs: list[int] = []
        self.named_backrefs: list[str] = []
        self.open_kinds: list[str] = []  # "group", "lookahead" or "lookbehind", innermost last

    # -- helpers
    def error(self, message: str) -> EcmaRegexError:
        return EcmaRegexError(f"{message} at offset {self.i} in {self.src!r}")

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.src[j] if j < len(self.src) else ""

    def run(self) -> str:
        quantifiable = False
        while self.i < len(self.src):
            c = self.src[self.i]
            if c == "\\":
                quantifiable = self.escape()
            elif c == "[":
                self.out.append(self.char_class())
                quantifiable = True
            elif c == "(":
                quantifiable = self.open_group()
            elif c == ")":
                if not self.open_kinds:
                    raise self.error("unmatched ')'")
                # u-mode forbids quantifying an assertion; Annex B allows it for lookaheads.
                closed = self.open_kinds.pop()
                quantifiable = closed == "group" or (closed == "lookahead" and not self.strict)
                self.out.append(")")
                self.i += 1
            elif c in "*+?{":
                if c == "{" and not self.quantifier_ahead():
                    if self.strict:
                        raise self.error("lone '{'")
                    self.out.append("\\{")
                    self.i += 1
                    quantifiable = True
                    continue
                if not quantifiable:
                    raise self.error("nothing to repeat")
                self.quantifier()
                quantifiable = False
            elif c in "}]":
                if self.strict:
                    raise self.error(f"lone {c!r}")
                self.out.append("\\" + c)
                self.i += 1
                quantifiable = True
            elif c == ".":
                self.out.append(_DOT)
                self.i += 1
                quantifiable = True
            elif c == "^":
                self.out.append("^")
                self.i += 1
                quantifiable = False
            elif c == "$":
                self.out.append("\\Z")  # end of input only (no multiline flag in JSON Schema)
                self.i += 1
                quantifiable = False
            elif c == "|":
                self.out.append("|")
                self.i += 1
                quantifiable = False
            else:
                self.out.append(_cp(ord(c)))
                self.i += 1
                quantifiable = True
        if self.open_kinds:
            raise self.error("missing ')'")
        for number in self.backrefs:
            if number > self.groups:
                raise EcmaRegexError(f"backreference \\{number} to a missing group in {self.src!r}")
        for name in self.named_backrefs:
            if name not in self.names:
                raise EcmaRegexError(f"backreference \\k<{name}> to a missing group in {self.src!r}")
        return "".join(self.out)

    # -- quantifiers
    def quantifier_ahead(self) -> bool:
        j = self.i + 1
        start = j
        while j < len(self.src) and self.src[j].isascii() and self.src[j].isdigit():
            j += 1
        if j == start:
            return False
        if j < len(self.src) and self.src[j] == "}":
            return True
        if j < len(self.src) and self.src[j] == ",":
            j += 1
            while j < len(self.src) and self.src[j].isascii() and self.src[j].isdigit():
                j += 1
            return j < len(self.src) and self.src[j] == "}"
        return False

    def quantifier(self) -> None:
        c = self.src[self.i]
        if c == "{":
            end = self.src.index("}", self.i)
            body = self.src[self.i + 1:end]
            low, _, high = body.partition(",")
            if high and int(high) < int(low):
                raise self.error("numbers out of order in {} quantifier")
            self.out.append("{" + body + "}")
            self.i = end + 1
        else:
            self.out.append(c)
            self.i += 1
        if self.peek() == "?":  # lazy
            self.out.append("?")
            self.i += 1
        if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self.quantifier_ahead()):
            raise self.error("nothing to repeat")

    # -- groups
    def open_group(self) -> bool:
        self.open_kinds.append("group")
        if self.peek(1) != "?":
            self.groups += 1
            self.out.append("(")
            self.i += 1
            return False
        kind = self.src[self.i + 2:self.i + 4]
        if kind[:1] in (":", "=", "!"):
            if kind[0] != ":":
                self.open_kinds[-1] = "lookahead"
            self.out.append("(?" + kind[0])
            self.i += 3
            return False
        if kind in ("<=", "<!"):
            self.open_kinds[-1] = "lookbehind"
            self.out.append("(?" + kind)
            self.i += 4
            return False
        if kind[:1] == "<":
            end = self.src.find(">", self.i + 3)
            name = self.src[self.i + 3:end] if end != -1 else ""
            if not _is_group_name(name):
                raise self.error("invalid capture group name")
            if name in self.names:
                raise self.error(f"duplicate capture group name {name!r}")
            self.names.add(name)
            self.groups += 1
            self.out.append(f"(?P<{name}>")
            self.i = end + 1
            return False
        raise self.error("invalid group: '(?' must be followed by ':', '=', '!', '<=', '<!' or '<name>'")

    # -- escapes outside a class; returns whether a quantifier may follow
    def escape(self) -> bool:
        self.i += 1
        if self.i >= len(self.src):
            raise self.error("'\\' at end of pattern")
        c = self.src[self.i]
        if c in "bB":
            self.out.append(_WORD_BOUNDARY if c == "b" else _NOT_WORD_BOUNDARY)
            self.i += 1
            return False
        if c in _CLASS_ESCAPES:
            self.out.append(f"[{_ranges_body(_CLASS_ESCAPES[c])}]")
            self.i += 1
            return True
        if c in "123456789":
            j = self.i
            while j < len(self.src) and self.src[j] in "0123456789":
                j += 1
            number = int(self.src[self.i:j])
            self.backrefs.append(number)
            self.out.append(f"(?:\\{number})")
            self.i = j
            return True
        if c == "k":
            if self.peek(1) != "<" or self.src.find(">", self.i) == -1:
                raise self.error("\\k must be followed by <name>")
            end = self.src.index(">", self.i)
            name = self.src[self.i + 2:end]
            if not _is_group_name(name):
                raise self.error("invalid group name in \\k<…>")
            self.named_backrefs.append(name)
            self.out.append(f"(?P={name})")
            self.i = end + 1
            return True
        if c in "pP":
            self.out.append(self.property_escape(c))
            return True
        self.out.append(self.character_escape(in_class=False))
        return True

    def property_escape(self, c: str) -> str:
        if self.peek(1) != "{" or self.src.find("}", self.i) == -1:
            raise self.error(f"\\{c} must be followed by {{property}}")
        end = self.src.index("}", self.i)
        body = self.src[self.i + 2:end]
        if not body or not all(ch.isascii() and (ch.isalnum() or ch in "_=") for ch in body):
            raise self.error(f"invalid property name in \\{c}{{{body}}}")
        self.i = end + 1
        return f"\\{c}{{{body}}}"

    def character_escape(self, *, in_class: bool) -> str:
        """Escapes that stand for exactly one character; ``self.i`` is just after the ``\\``."""
        code = self.escaped_code_point(in_class=in_class)
        return _cp(code)

    def escaped_code_point(self, *, in_class: bool) -> int:
        c = self.src[self.i]
        self.i += 1
        if c in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[c]
        if c == "c":
            letter = self.peek()
            if letter.isascii() and letter.isalpha():
                self.i += 1
                return ord(letter) % 32
            raise self.error("\\c must be followed by an ASCII letter")
        if c == "0":
            if self.peek().isascii() and self.peek().isdigit():
                raise self.error("octal escapes are not allowed")
            return 0
        if c == "x":
            digits = self.src[self.i:self.i + 2]
            if len(digits) == 2 and _is_hex(digits):
                self.i += 2
                return int(digits, 16)
            raise self.error("\\x must be followed by two hex digits")
        if c == "u":
            return self.unicode_escape()
        if in_class and c == "b":
            return 0x08
        if in_class and c == "-":
            return ord("-")
        if c in _SYNTAX_CHARS:
            return ord(c)
        if self.strict or c.isalnum():
            raise self.error(f"invalid escape \\{c}")
        return ord(c)  # Annex B identity escape of a non-alphanumeric character (\_, \-, \ …)

    def unicode_escape(self) -> int:
        if self.peek() == "{":
            end = self.src.find("}", self.i)
            digits = self.src[self.i + 1:end] if end != -1 else ""
            if not digits or not _is_hex(digits) or int(digits, 16) > _MAX_CODE_POINT:
                raise self.error("invalid \\u{…} escape")
            self.i = end + 1
            return int(digits, 16)
        digits = self.src[self.i:self.i + 4]
        if len(digits) != 4 or not _is_hex(digits):
            raise self.error("\\u must be followed by four hex digits or {…}")
        self.i += 4
        code = int(digits, 16)
        # A surrogate pair written as two \u escapes is one code point in u-mode.
        if 0xD800 <= code <= 0xDBFF and self.src[self.i:self.i + 2] == "\\u":
            low = self.src[self.i + 2:self.i + 6]
            if len(low) == 4 and _is_hex(low) and 0xDC00 <= int(low, 16) <= 0xDFFF:
                self.i += 6
                return 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)
        return code

    # -- character classes
    def char_class(self) -> str:
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        items: list[str] = []  # regex class body pieces
        while True:
            if self.i >= len(self.src):
                raise self.error("missing ']'")
            if self.src[self.i] == "]":
                self.i += 1
                break
            first, first_code = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                second, second_code = self.class_atom()
                if first_code is None or second_code is None:
                    if self.strict:
                        raise self.error("a class escape cannot bound a range")
                    items += [first, _cp(ord("-")), second]  # Annex B: '-' is literal
                    continue
                if first_code > second_code:
                    raise self.error("range out of order in character class")
                items.append(f"{_cp(first_code)}-{_cp(second_code)}")
            else:
                items.append(first)
        if not items:
            # [] matches nothing, [^] any character (regex would read ']' as a literal).
            return "(?s:.)" if negated else "(?!)"
        return "[" + ("^" if negated else "") + "".join(items) + "]"

    def class_atom(self) -> tuple[str, int | None]:
        """One ClassAtom as a class-body fragment, and its code point (None for a set)."""
        c = self.src[self.i]
        if c != "\\":
            self.i += 1
            return _cp(ord(c)), ord(c)
        self.i += 1
        if self.i >= len(self.src):
            raise self.error("'\\' at end of pattern")
        e = self.src[self.i]
        if e in _CLASS_ESCAPES:
            self.i += 1
            return _ranges_body(_CLASS_ESCAPES[e]), None
        if e in "pP":
            return self.property_escape(e), None
        if e == "B" or e in "123456789" or e == "k":
            raise self.error(f"\\{e} is not allowed in a character class")
        code = self.escaped_code_point(in_class=True)
        return _cp(code), code


def _is_hex(text: str) -> bool:
    return all(ch in "0123456789abcdefABCDEF" for ch in text)


def _is_group_name(name: str) -> bool:
    # ECMA RegExpIdentifierName: IdentifierStart ($, _, ID_Start) then IdentifierPart.
    return bool(name) and (name[0] in "$_" or name[0].isidentifier()) and all(
        ch == "$" or ("a" + ch).isidentifier() for ch in name[1:]
    )


def translate(source: str, *, strict: bool = False) -> str:
    """The ``regex``-package pattern with the ECMA-262 (``u`` flag) meaning of ``source``.

    Raises :class:`EcmaRegexError` for a pattern that is not ECMA-262 (at the chosen strictness).
    """
    if not isinstance(source, str):
        raise EcmaRegexError(f"a pattern must be a string, not {type(source).__name__}")
    return _Translator(source, strict).run()


@functools.lru_cache(maxsize=8192)
def compile_pattern(source: str) -> regex.Pattern:
    """Compiled ECMA-262 ``source`` (lenient grammar), cached: the patterns come from published
    schemas (``pattern`` and ``patternProperties`` keys), a bounded set, used on every call."""
    try:
        return regex.compile(translate(source, strict=False))
    except regex.error as exc:  # e.g. an unknown \p{…} property
        raise EcmaRegexError(f"{exc} in {source!r}") from None


def is_ecma_regex(source: str) -> bool:
    """The ``regex`` format: ``source`` is an ECMA-262 regular expression in ``u`` mode.

    Not cached: it judges argument values, which a model chooses (a cache would hold them).
    """
    try:
        regex.compile(translate(source, strict=True))
    except (EcmaRegexError, regex.error):
        return False
    return True
