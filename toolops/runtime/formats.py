"""Strict checkers for the JSON Schema ``format`` values ToolOps asserts.

jsonschema's own checkers (with its ``format-nongpl`` extras) are lax where it matters for tool
arguments: leap seconds refused, a trailing newline accepted, ISO 8601 durations RFC 3339 forbids,
``uuid.UUID``'s forgiving parser, an e-mail check that only looks for ``@``. Each checker here
follows the ABNF of the RFC its docstring names, with ASCII-only digits (``[0-9]``, never
``\\d``) and ``\\Z`` anchors (``$`` would accept a trailing newline). Formats without a checker of
our own keep jsonschema's (``idn-email``, ``json-pointer``, ``iri-reference`` is ours via IRI).

:data:`FORMAT_CHECKER` is what validators use when format assertion is on; :data:`ASSERTED_FORMATS`
lists what it can assert, so a ToolSpec using anything else can be refused at publish time.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any, Callable

import idna
from idna.core import check_bidi, check_label
from jsonschema import Draft202012Validator, FormatChecker

from toolops.runtime.ecma_regex import is_ecma_regex

__all__ = [
    "ASSERTED_FORMATS", "FORMAT_CHECKER", "is_date", "is_date_time", "is_duration", "is_email",
    "is_hostname", "is_idn_hostname", "is_ipv4", "is_ipv6", "is_iri", "is_iri_reference",
    "is_relative_json_pointer", "is_time", "is_uri", "is_uri_reference", "is_uri_template",
    "is_uuid",
]

# --------------------------------------------------------------------------- RFC 3339


_DATE_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIME_RE = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _full_date_ok(match: re.Match) -> bool:
    year, month, day = (int(g) for g in match.groups())
    if not 1 <= month <= 12:
        return False
    leap = month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 1 <= day <= _DAYS_IN_MONTH[month - 1] + leap


def _full_time_ok(match: re.Match) -> bool:
    hour, minute, second = int(match[1]), int(match[2]), int(match[3])
    if match[4]:
        offset = 0
    else:
        off_h, off_m = int(match[6]), int(match[7])
        if off_h > 23 or off_m > 59:
            return False
        offset = (off_h * 60 + off_m) * (1 if match[5] == "+" else -1)
    if hour > 23 or minute > 59 or second > 60:
        return False
    if second == 60:
        # RFC 3339 §5.7: a leap second is inserted at 23:59:60 UTC only.
        utc_minutes = (hour * 60 + minute - offset) % (24 * 60)
        return utc_minutes == 23 * 60 + 59
    return True


def is_date(instance: Any) -> bool:
    """RFC 3339 §5.6 ``full-date``: ``YYYY-MM-DD``, the day checked against month and leap year."""
    if not isinstance(instance, str):
        return True
    match = _DATE_RE.fullmatch(instance)
    return bool(match) and _full_date_ok(match)


def is_time(instance: Any) -> bool:
    """RFC 3339 §5.6 ``full-time``: partial time with a required offset (``Z`` or ``±hh:mm``).

    Seconds may be 60 (a leap second) only when the time is 23:59:60 in UTC after applying
    the offset (§5.7), so ``15:59:60-08:00`` is valid and ``23:59:60+01:00`` is not.
    """
    if not isinstance(instance, str):
        return True
    match = _TIME_RE.fullmatch(instance)
    return bool(match) and _full_time_ok(match)


def is_date_time(instance: Any) -> bool:
    """RFC 3339 §5.6 ``date-time``: ``full-date "T" full-time`` (``T``/``Z`` either case, §5.6 note)."""
    if not isinstance(instance, str):
        return True
    date, sep, time = instance[:10], instance[10:11], instance[11:]
    date_match, time_match = _DATE_RE.fullmatch(date), _TIME_RE.fullmatch(time)
    return (
        sep in ("T", "t") and bool(date_match) and bool(time_match)
        and _full_date_ok(date_match) and _full_time_ok(time_match)
    )


# dur-date = (dur-day / dur-month / dur-year) [dur-time]; duration = "P" (dur-date / dur-time / dur-week)
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = rf"(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:{_DUR_TIME})?"
_DURATION_RE = re.compile(rf"P(?:{_DUR_DATE}|{_DUR_TIME}|[0-9]+W)")


def is_duration(instance: Any) -> bool:
    """RFC 3339 Appendix A ``duration``: no fractions, no sign, weeks only alone, units in order."""
    return not isinstance(instance, str) or bool(_DURATION_RE.fullmatch(instance))


# --------------------------------------------------------------------------- RFC 9562 (4122)

_UUID_RE = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")


def is_uuid(instance: Any) -> bool:
    """RFC 9562 §4 (was RFC 4122 §3) string form: 8-4-4-4-12 hex digits, any version/variant."""
    return not isinstance(instance, str) or bool(_UUID_RE.fullmatch(instance))


# --------------------------------------------------------------------------- IP addresses

_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
_IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
# RFC 3986 §3.2.2 IPv6address, the nine alternatives verbatim.
_IPV6 = "(?:" + "|".join([
    rf"(?:{_H16}:){{6}}{_LS32}",
    rf"::(?:{_H16}:){{5}}{_LS32}",
    rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
]) + ")"
_IPV4_RE = re.compile(_IPV4)
_IPV6_RE = re.compile(_IPV6)


def is_ipv4(instance: Any) -> bool:
    """RFC 2673 §3.2 dotted-quad (RFC 3986 ``IPv4address``): four decimal octets, no leading zeros."""
    return not isinstance(instance, str) or bool(_IPV4_RE.fullmatch(instance))


def is_ipv6(instance: Any) -> bool:
    """RFC 4291 §2.2 text form per RFC 3986 ``IPv6address``: no zone, no prefix, strict embedded IPv4."""
    return not isinstance(instance, str) or bool(_IPV6_RE.fullmatch(instance))


# --------------------------------------------------------------------------- RFC 3986 / 3987


def _uri_patterns(*, iri: bool) -> tuple[re.Pattern, re.Pattern]:
    """(absolute, reference) patterns from RFC 3986 §3-4 (RFC 3987 §2.2 when ``iri``)."""
    ucschar = (
        "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
        "\U00010000-\U0001fffd\U00020000-\U0002fffd\U00030000-\U0003fffd\U00040000-\U0004fffd"
        "\U00050000-\U0005fffd\U00060000-\U0006fffd\U00070000-\U0007fffd\U00080000-\U0008fffd"
        "\U00090000-\U0009fffd\U000a0000-\U000afffd\U000b0000-\U000bfffd\U000c0000-\U000cfffd"
        "\U000d0000-\U000dfffd\U000e1000-\U000efffd"
    ) if iri else ""
    iprivate = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd" if iri else ""
    unreserved = rf"A-Za-z0-9\-._~{ucschar}"
    sub_delims = r"!$&'()*+,;="
    pct = r"%[0-9A-Fa-f]{2}"
    pchar = rf"(?:[{unreserved}{sub_delims}:@]|{pct})"
    scheme = r"[A-Za-z][A-Za-z0-9+\-.]*"
    userinfo = rf"(?:[{unreserved}{sub_delims}:]|{pct})*"
    ip_future = rf"[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~{sub_delims}:]+"
    host = rf"(?:\[(?:{_IPV6}|{ip_future})\]|(?:[{unreserved}{sub_delims}]|{pct})*)"
    authority = rf"(?:{userinfo}@)?{host}(?::[0-9]*)?"
    segment, segment_nz = rf"{pchar}*", rf"{pchar}+"
    segment_nz_nc = rf"(?:[{unreserved}{sub_delims}@]|{pct})+"
    path_abempty = rf"(?:/{segment})*"
    path_absolute = rf"/(?:{segment_nz}(?:/{segment})*)?"
    path_rootless = rf"{segment_nz}(?:/{segment})*"
    path_noscheme = rf"{segment_nz_nc}(?:/{segment})*"
    query = rf"(?:{pchar}|[/?{iprivate}])*"
    fragment = rf"(?:{pchar}|[/?])*"
    tail = rf"(?:\?{query})?(?:#{fragment})?"
    hier = rf"(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|)"
    relative = rf"(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|)"
    absolute = rf"{scheme}:{hier}{tail}"
    return re.compile(absolute), re.compile(rf"(?:{absolute}|{relative}{tail})")


_URI_RE, _URI_REFERENCE_RE = _uri_patterns(iri=False)
_IRI_RE, _IRI_REFERENCE_RE = _uri_patterns(iri=True)


def is_uri(instance: Any) -> bool:
    """RFC 3986 §3 ``URI``: an absolute URI (scheme required), ASCII only, strict percent-encoding."""
    return not isinstance(instance, str) or bool(_URI_RE.fullmatch(instance))


def is_uri_reference(instance: Any) -> bool:
    """RFC 3986 §4.1 ``URI-reference``: a URI or a relative reference."""
    return not isinstance(instance, str) or bool(_URI_REFERENCE_RE.fullmatch(instance))


def is_iri(instance: Any) -> bool:
    """RFC 3987 §2.2 ``IRI``: RFC 3986's grammar with ``ucschar`` (and ``iprivate`` in the query)."""
    return not isinstance(instance, str) or bool(_IRI_RE.fullmatch(instance))


def is_iri_reference(instance: Any) -> bool:
    """RFC 3987 §2.2 ``IRI-reference``."""
    return not isinstance(instance, str) or bool(_IRI_REFERENCE_RE.fullmatch(instance))


# --------------------------------------------------------------------------- RFC 6570

_UT_PCT = r"%[0-9A-Fa-f]{2}"
_UT_LITERAL = (
    r"(?:[\x21\x23\x24\x26\x27\x28-\x3b\x3d\x3f-\x5b\x5d\x5f\x61-\x7a\x7e"
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef\U00010000-\U000efffd\ue000-\uf8ff"
    "\U000f0000-\U000ffffd\U00100000-\U0010fffd]" rf"|{_UT_PCT})"
)
_UT_VARCHAR = rf"(?:[A-Za-z0-9_]|{_UT_PCT})"
_UT_VARSPEC = rf"{_UT_VARCHAR}(?:\.?{_UT_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_UT_EXPRESSION = rf"\{{[+#./;?&=,!@|]?{_UT_VARSPEC}(?:,{_UT_VARSPEC})*\}}"
_URI_TEMPLATE_RE = re.compile(rf"(?:{_UT_LITERAL}|{_UT_EXPRESSION})*")


def is_uri_template(instance: Any) -> bool:
    """RFC 6570 §2 ``URI-Template``: literals and ``{op varspec,…}`` expressions (level 4).

    The apostrophe is accepted in literals: §2.1's ABNF leaves out %x27 although it is an
    RFC 3986 sub-delim that §1.5 says literals may carry (as the JSON-Schema-Test-Suite does).
    """
    return not isinstance(instance, str) or bool(_URI_TEMPLATE_RE.fullmatch(instance))


# --------------------------------------------------------------------------- RFC 5321

_ATEXT = r"[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~]"
_DOT_STRING = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_QUOTED_STRING = r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"'
_LDH_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
_DOMAIN = rf"{_LDH_LABEL}(?:\.{_LDH_LABEL})*"
_ADDRESS_LITERAL = rf"\[(?:{_IPV4}|IPv6:{_IPV6})\]"
_EMAIL_RE = re.compile(rf"({_DOT_STRING}|{_QUOTED_STRING})@({_DOMAIN}|{_ADDRESS_LITERAL})")


def is_email(instance: Any) -> bool:
    """RFC 5321 §4.1.2 ``Mailbox``: dot-string or quoted-string local part (≤ 64 octets, §4.5.3.1.1),
    then a domain (≤ 255 octets) or an address literal (IPv4, or ``IPv6:`` + address, §4.1.3).

    A general address literal is refused: ``IPv6`` is the only registered tag.
    """
    if not isinstance(instance, str):
        return True
    match = _EMAIL_RE.fullmatch(instance)
    return bool(match) and len(match[1]) <= 64 and len(match[2]) <= 255


# --------------------------------------------------------------------------- RFC 1123 / 5890

_NR_LDH_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?")
_IDN_SEPARATORS = re.compile("[.\u3002\uff0e\uff61]")


def _ulabel_ok(ulabel: str) -> bool:
    try:
        check_label(ulabel)  # NFC, hyphens, leading combining mark, PVALID/CONTEXTJ/CONTEXTO
        return len(idna.alabel(ulabel)) <= 63
    except (idna.IDNAError, UnicodeError, ValueError):
        return False


def _ascii_label_ok(label: str) -> bool:
    if not _NR_LDH_RE.fullmatch(label):
        return False
    if label[2:4] != "--":
        return True
    if label[:4].lower() != "xn--":
        return False  # RFC 5891 §4.2.3.1: "--" in positions 3-4 is reserved for A-labels
    try:
        ulabel = label[4:].encode("ascii").decode("punycode")
    except UnicodeError:
        return False
    return _ulabel_ok(ulabel) and idna.alabel(ulabel).decode("ascii") == label.lower()


def _labels_ok(labels: list[str], *, unicode: bool) -> bool:
    ulabels = []
    for label in labels:
        if label.isascii():
            if not _ascii_label_ok(label):
                return False
            ulabels.append(label[4:].encode().decode("punycode") if label[:4].lower() == "xn--" else label)
        elif not unicode or not _ulabel_ok(label):
            return False
        else:
            ulabels.append(label)
    # RFC 5893 §2: in a domain with any right-to-left label, every label obeys the Bidi rule.
    if any(unicodedata.bidirectional(ch) in ("R", "AL", "AN") for u in ulabels for ch in u):
        try:
            return all(check_bidi(u, check_ltr=True) for u in ulabels)
        except idna.IDNAError:
            return False
    return True


def is_hostname(instance: Any) -> bool:
    """RFC 1123 §2.1 host name of LDH labels (≤ 63 octets, ≤ 253 in all, no trailing dot); an
    ``xn--`` label must be a valid IDNA 2008 A-label (RFC 5890 §2.3.2.1, RFC 5891 §4-5)."""
    if not isinstance(instance, str):
        return True
    if not instance or len(instance) > 253 or not instance.isascii():
        return False
    return _labels_ok(instance.split("."), unicode=False)


def is_idn_hostname(instance: Any) -> bool:
    """RFC 5890 §2.3.2.3 internationalized host name: U-labels (IDNA 2008 + the Bidi rule of
    RFC 5893) or LDH labels, separated by ``.`` or an ideographic full stop (RFC 3490 §3.1)."""
    if not isinstance(instance, str):
        return True
    labels = _IDN_SEPARATORS.split(instance)
    if not instance or any(not label for label in labels):
        return False
    try:
        encoded = ".".join(label if label.isascii() else idna.alabel(label).decode() for label in labels)
    except (idna.IDNAError, UnicodeError, ValueError):
        return False
    return len(encoded) <= 253 and _labels_ok(labels, unicode=True)


# --------------------------------------------------------------------------- RFC 6901 draft

_RELATIVE_JSON_POINTER_RE = re.compile(r"(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^/~]|~[01])*)*)")


def is_relative_json_pointer(instance: Any) -> bool:
    """draft-handrews-relative-json-pointer-01 §3: ASCII non-negative integer, then ``#`` or a
    JSON Pointer (RFC 6901)."""
    return not isinstance(instance, str) or bool(_RELATIVE_JSON_POINTER_RE.fullmatch(instance))


def is_regex(instance: Any) -> bool:
    """ECMA-262 (``u`` mode) regular expression, per JSON Schema 2020-12 validation §7.3.8."""
    return not isinstance(instance, str) or is_ecma_regex(instance)


# --------------------------------------------------------------------------- the checker

OWN_CHECKERS: dict[str, Callable[[Any], bool]] = {
    "date": is_date, "date-time": is_date_time, "time": is_time, "duration": is_duration,
    "uuid": is_uuid, "email": is_email, "ipv4": is_ipv4, "ipv6": is_ipv6,
    "uri": is_uri, "uri-reference": is_uri_reference, "iri": is_iri,
    "iri-reference": is_iri_reference, "uri-template": is_uri_template,
    "hostname": is_hostname, "idn-hostname": is_idn_hostname,
    "relative-json-pointer": is_relative_json_pointer, "regex": is_regex,
}


def _build_checker() -> FormatChecker:
    # jsonschema's checkers for what we do not override (idn-email, json-pointer); a fresh
    # FormatChecker so the library's shared one is never modified.
    checker = FormatChecker(formats=())
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
    for name, func in OWN_CHECKERS.items():
        checker.checkers[name] = (func, ())
    return checker


FORMAT_CHECKER: FormatChecker = _build_checker()
ASSERTED_FORMATS: frozenset[str] = frozenset(FORMAT_CHECKER.checkers)
