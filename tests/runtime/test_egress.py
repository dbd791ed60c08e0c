"""Egress policy (docs/concepts/admission.md): schemes, URL scopes, the address deny-list and its explicit openers."""
from __future__ import annotations

import pytest

from toolops.decisions.authorization import scope_matches, url_prefix_matches
from toolops.decisions.egress import (
    ADDRESS_DENIED, BAD_URL, SCHEME_REFUSED, EgressRefused, address_denied, check_addresses, hop_in_scope,
    openers_from_allowlist, openers_from_grants, redirect_target, target_for,
)

PREFIX = "http://127.0.0.1:8765/web/pages/"


@pytest.mark.parametrize("url", [
    "file:///etc/passwd", "gopher://127.0.0.1:70/_x", "ftp://example.com/", "javascript:alert(1)",
    "data:text/plain,hi", "dict://127.0.0.1:11211/", "/relative/path", "ldap://x/",
])
def test_it_refuses_every_non_http_scheme_before_sending(url):
    with pytest.raises(EgressRefused) as exc:
        target_for(url)
    assert exc.value.code == SCHEME_REFUSED


@pytest.mark.parametrize("url", [
    "http://user:pw@example.com/", "http://example.com@127.0.0.1/", "http://exa mple.com/", "http://example.com:99999/",
    "http://[::1/", "http://exa\\mple.com/", "http:///nohost", "http://example.com/\x00",
])
def test_it_refuses_unclean_urls(url):
    with pytest.raises(EgressRefused) as exc:
        target_for(url)
    assert exc.value.code == BAD_URL


@pytest.mark.parametrize("url,ok", [
    ("http://127.0.0.1:8765/web/pages/small", True),
    ("http://127.0.0.1:8765/web/pages/small?x=1", True),
    ("HTTP://127.0.0.1:8765/web/pages/large", True),
    ("http://127.0.0.1:8765/web/pages", False),  # the prefix ends in "/": only what is below it
    ("http://127.0.0.1:8765/web/pages-old/x", False),
    ("http://127.0.0.1:8765/web/pages/../../_control/requests", False),
    ("http://127.0.0.1:8765/web/pages/%2e%2e/%2e%2e/_control/requests", False),
    ("http://127.0.0.1:8765/web/pages/%252e%252e/%252e%252e/calendar", False),
    ("http://127.0.0.1:8765/calendar/calendars/primary/events", False),
    ("https://127.0.0.1:8765/web/pages/small", False),  # scheme pinned
    ("http://127.0.0.1:8766/web/pages/small", False),  # port pinned
    ("http://127.0.0.1/web/pages/small", False),
    ("http://localhost:8765/web/pages/small", False),  # host pinned: a name is not the address
    ("http://127.0.0.1.nip.io:8765/web/pages/small", False),
    ("http://x@127.0.0.1:8765/web/pages/small", False),
])
def test_it_pins_scheme_host_port_and_path_in_a_url_prefix(url, ok):
    assert url_prefix_matches(PREFIX, url) is ok
    assert scope_matches("url_prefix", [PREFIX], url) == ((True, None) if ok else (False, "scope_mismatch"))


def test_it_applies_default_ports_on_both_sides():
    assert url_prefix_matches("https://example.com/api/", "https://example.com:443/api/x")
    assert not url_prefix_matches("https://example.com/api/", "https://example.com:8443/api/x")


@pytest.mark.parametrize("address,denied", [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"), ("0.0.0.0", "unspecified"),
    ("::", "unspecified"), ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
    ("169.254.169.254", "link_local"), ("fe80::1", "link_local"), ("fc00::1", "unique_local"),
    ("fd12:3456::1", "unique_local"), ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("100.64.0.1", "shared_cgnat"), ("0.1.2.3", "this_network"), ("255.255.255.255", "unspecified"),
    ("::ffff:127.0.0.1", "ipv4_embedded_loopback"), ("::ffff:10.0.0.1", "ipv4_embedded_private"),
    ("::127.0.0.1", "ipv4_embedded_loopback"), ("64:ff9b::7f00:1", "ipv4_embedded_loopback"),
    ("2002:7f00:1::1", "ipv4_embedded_loopback"), ("::ffff:169.254.169.254", "ipv4_embedded_link_local"),
    ("192.0.2.1", None), ("8.8.8.8", None), ("2606:4700:4700::1111", None), ("::ffff:8.8.8.8", None),
])
def test_it_classifies_addresses(address, denied):
    reason = address_denied(address)
    if denied is None:
        assert reason is None or address == "192.0.2.1"  # TEST-NET-1 is documentation space
    elif denied == "unspecified" and address == "255.255.255.255":
        assert reason is not None  # broadcast: denied under whichever name
    else:
        assert reason == denied


def test_it_checks_every_resolved_address_and_connects_to_the_checked_one():
    target = target_for("http://mixed.example:80/")
    with pytest.raises(EgressRefused) as exc:
        check_addresses(target, ["93.184.216.34", "127.0.0.1"], set())
    assert exc.value.code == ADDRESS_DENIED
    assert check_addresses(target, ["93.184.216.34"], set()) == "93.184.216.34"


def test_it_opens_a_denied_address_only_for_the_ip_and_port_a_grant_names():
    grants = [{"scope_kind": "url_prefix", "scope_values": [PREFIX]}]
    openers = openers_from_grants(grants)
    assert openers == {("127.0.0.1", 8765)}
    assert check_addresses(target_for("http://127.0.0.1:8765/web/pages/x"), ["127.0.0.1"], openers) == "127.0.0.1"
    with pytest.raises(EgressRefused):
        check_addresses(target_for("http://127.0.0.1:8000/"), ["127.0.0.1"], openers)
    # A grant naming a host name opens nothing: DNS could point that name anywhere.
    assert openers_from_grants([{"scope_kind": "url_prefix", "scope_values": ["http://localhost:8765/"]}]) == set()
    with pytest.raises(EgressRefused):
        check_addresses(target_for("http://localhost:8765/"), ["127.0.0.1"], set())


def test_it_reads_an_operator_allowlist_of_addresses_only():
    assert openers_from_allowlist(["127.0.0.1:8765", "[::1]:9000"]) == {("127.0.0.1", 8765), ("::1", 9000)}
    with pytest.raises(ValueError):
        openers_from_allowlist(["localhost:8765"])


def test_it_scopes_every_hop():
    grants = [{"scope_kind": "url_prefix", "scope_values": [PREFIX]}]
    assert hop_in_scope(target_for("http://127.0.0.1:8765/web/pages/small"), grants)
    assert not hop_in_scope(target_for("http://127.0.0.1:8765/_control/requests"), grants)
    # domain_suffix names hosts, not ports: only the scheme's default port is covered.
    domain = [{"scope_kind": "domain_suffix", "scope_values": ["example.com"]}]
    assert hop_in_scope(target_for("https://www.example.com/x"), domain)
    assert not hop_in_scope(target_for("https://www.example.com:8443/x"), domain)
    assert not hop_in_scope(target_for("https://example.com.evil.net/x"), domain)
    assert not hop_in_scope(target_for("http://a/"), [{"scope_kind": "path_prefix", "scope_values": ["/"]}])


def test_it_resolves_redirects_relative_to_the_current_url_and_rechecks_the_scheme():
    here = target_for("http://127.0.0.1:8765/web/pages/small")
    assert redirect_target(here, "large").url == "http://127.0.0.1:8765/web/pages/large"
    assert redirect_target(here, "/_control/requests").url == "http://127.0.0.1:8765/_control/requests"
    for location in ("file:///etc/passwd", "gopher://x/", ""):
        with pytest.raises(EgressRefused):
            redirect_target(here, location)
