"""The strict format checkers of toolops.runtime.formats, on examples taken from their RFCs.

The JSON-Schema-Test-Suite runs them too (tests/runtime/test_json_schema_suite.py); these are
the RFCs' own examples plus the edge each checker exists for.
"""
from __future__ import annotations

import pytest

from toolops.runtime import formats
from toolops.runtime.validation import compile_validator

CASES = {
    # RFC 3339 §5.8 examples; §5.7 leap seconds; offsets and case of T/Z.
    formats.is_date_time: (
        ["1985-04-12T23:20:50.52Z", "1996-12-19T16:39:57-08:00", "1990-12-31T23:59:60Z",
         "1990-12-31T15:59:60-08:00", "1937-01-01T12:00:27.87+00:20", "2024-02-29t00:00:00z"],
        ["1985-04-12T23:20:50.52Z\n", "1990-12-31T23:58:60Z", "1985-04-12 23:20:50Z",
         "1985-04-12T23:20:50", "2023-02-29T00:00:00Z", "1985-04-12T23:20:50+0100"],
    ),
    formats.is_date: (["1985-04-12", "2000-02-29"], ["1900-02-29", "1985-4-12", "1985-04-12\n", "١٩٨٥-04-12"]),
    formats.is_time: (
        ["23:20:50.52Z", "16:39:57-08:00", "23:59:60Z", "15:59:60-08:00", "12:00:00-00:00"],
        ["23:20:50", "15:59:60+08:00", "24:00:00Z", "12:00:00+24:00"],
    ),
    # RFC 3339 Appendix A grammar.
    formats.is_duration: (
        ["P3Y6M4DT12H30M5S", "P1W", "PT36H", "P1Y", "PT0S"],
        ["P1.5D", "P", "PT", "-P1D", "P1W2D", "P1Y2D", "P1DT", "p1d"],
    ),
    # RFC 9562 §4 / RFC 4122 §3 example.
    formats.is_uuid: (
        ["f81d4fae-7dec-11d0-a765-00a0c91e6bf6", "F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6"],
        ["{f81d4fae-7dec-11d0-a765-00a0c91e6bf6}", "f81d4fae7dec11d0a76500a0c91e6bf6",
         "urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6", "f81d4fae-7dec-11d0-a765-00a0c91e6bf6\n"],
    ),
    # RFC 3696 §3 examples (valid under RFC 5321), address literals of RFC 5321 §4.1.3.
    formats.is_email: (
        ['"Abc@def"@example.com', '"Fred Bloggs"@example.com', "customer/department=shipping@example.com",
         "$A12345@example.com", "!def!xyz%abc@example.com", "_somename@example.com",
         "user@[192.0.2.1]", "user@[IPv6:2001:db8::1]", '"a\\"b"@example.com'],
        ["Abc.example.com", "a@b@example.com", "a" * 65 + "@example.com", "user@[300.0.0.1]",
         "user@[tag:content]", "user@-example.com", "user@example.com\n", "usér@example.com"],
    ),
    # RFC 2673 / RFC 3986 dotted-quad.
    formats.is_ipv4: (["192.0.2.16", "0.0.0.0"], ["192.0.2.016", "192.0.2", "192.0.2.16\n", "1.2.3.256"]),
    # RFC 4291 §2.2 text forms.
    formats.is_ipv6: (
        ["ABCD:EF01:2345:6789:ABCD:EF01:2345:6789", "2001:DB8:0:0:8:800:200C:417A", "2001:DB8::8:800:200C:417A",
         "FF01::101", "::1", "::", "0:0:0:0:0:0:13.1.68.3", "::FFFF:129.144.52.38", "::13.1.68.3"],
        ["2001:DB8::8::417A", "2001:DB8:0:0:8:800:200C:417A:1", "::FFFF:129.144.52.038", "fe80::1%eth0"],
    ),
    # RFC 3986 §1.1.2 examples.
    formats.is_uri: (
        ["ftp://ftp.is.co.za/rfc/rfc1808.txt", "http://www.ietf.org/rfc/rfc2396.txt",
         "ldap://[2001:db8::7]/c=GB?objectClass?one", "mailto:John.Doe@example.com",
         "news:comp.infosystems.www.servers.unix", "tel:+1-816-555-1212", "telnet://192.0.2.16:80/",
         "urn:oasis:names:specification:docbook:dtd:xml:4.1.2", "http://[v7.fe:80]/"],
        ["//example.com/", "g;x?y#s", "http://exa mple.com/", "http://example.com/%zz", "http://é.com/"],
    ),
    # RFC 3986 §5.4 reference resolution examples (all are references).
    formats.is_uri_reference: (
        ["g:h", "g", "./g", "g/", "/g", "//g", "?y", "g?y", "#s", "g#s", "g;x?y#s", "", ".", "../../g"],
        ["g h", "%zz", "http://[::1", "\\g"],
    ),
    # RFC 3987: IRIs allow ucschar; iprivate only in the query.
    formats.is_iri: (["http://例え.テスト/パス?q=\ue000", "http://[2001:db8::1]/"], ["http://例え.テスト/\ue000", "例え"]),
    # RFC 6570 §1.2 level 1-4 examples.
    formats.is_uri_template: (
        ["{var}", "{+path}/here", "X{#var}", "{/var,x}/here", "{?x,y}", "{&x}", "{var:3}", "{list*}", "{;keys*}", "{.who}"],
        ["{var", "{}", "{var:0}", "{v w}", "a}b"],
    ),
    # RFC 1123 host names; RFC 5891 A-labels.
    formats.is_hostname: (
        ["example.com", "a-b.example", "xn--bcher-kva.example", "1.example"],
        ["example.com.", "-a.example", "a" * 64 + ".example", "xn--X.example", "ab--c.example", "bücher.example"],
    ),
    formats.is_idn_hostname: (["bücher.example", "例え。テスト", "xn--bcher-kva.example"], ["bücher.", "0a.א"]),
    formats.is_relative_json_pointer: (["0", "1/a~1b", "2#", "10/0"], ["01", "-1", "1#/a", "0/~2"]),
}


@pytest.mark.parametrize(
    ("checker", "text", "valid"),
    [
        pytest.param(checker, text, valid, id=f"{checker.__name__}-{'ok' if valid else 'bad'}-{i}")
        for checker, (good, bad) in CASES.items()
        for valid, texts in ((True, good), (False, bad))
        for i, text in enumerate(texts)
    ],
)
def test_it_checks_the_rfc_examples(checker, text, valid):
    assert checker(text) is valid


def test_it_names_its_rfc_in_every_checker_docstring():
    for name, checker in formats.OWN_CHECKERS.items():
        doc = checker.__doc__ or ""
        assert "RFC" in doc or "ECMA-262" in doc or "draft-" in doc, name


def test_it_ignores_non_strings_like_every_json_schema_format():
    for checker in formats.OWN_CHECKERS.values():
        assert all(checker(value) for value in (1, 1.5, None, True, [], {}))


def test_it_asserts_formats_only_when_format_assertion_is_on():
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}}}
    bad = {"when": "1985-04-12T23:20:50Z\n"}
    assert compile_validator(schema, format_assertion=False).validate(bad) == []
    issues = compile_validator(schema, format_assertion=True).validate(bad)
    assert [(i.pointer, i.keyword) for i in issues] == [("/when", "format")]
