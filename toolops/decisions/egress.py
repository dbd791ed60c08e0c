"""Egress policy (docs/concepts/admission.md): where an executor may send a request, decided before it is sent.

Pure decisions; the worker does the I/O (``worker/executors/http_client.py``):

* ``target_for(url)`` — an absolute ``http``/``https`` URL without userinfo, or ``EgressRefused``
  (``scheme_refused`` / ``bad_url``): ``file:``, ``gopher:``, ``ftp:``… never leave the worker.
* ``hop_in_scope(target, grants)`` — a URL that came from the model (or from a remote's
  ``Location``) must fall inside a grant's scope: ``url_prefix`` pins scheme, host, port and path
  prefix; ``domain_suffix`` names hosts, so it covers only the scheme's default port; ``exact``
  and ``glob`` match the whole URL; ``any`` covers every URL; ``path_prefix`` covers none.
* ``address_denied(ip)`` — the deny-list: loopback, link-local, private, unique-local, shared
  (CGNAT), multicast, unspecified, reserved, documentation/benchmark, broadcast, and the same
  hidden in IPv4-mapped (``::ffff:a.b.c.d``), IPv4-compatible (``::a.b.c.d``), NAT64
  (``64:ff9b::/96``) and 6to4 (``2002::/16``) forms.
* ``check_addresses(target, addresses, openers)`` — every resolved address must pass: a denied
  one only when an opener names exactly that address and port (a grant's ``url_prefix``/``exact``
  URL with an IP literal host, or the operator's allow-list for endpoints fixed in a ToolSpec —
  never a host *name*, which DNS could point anywhere). The executor then connects to the
  address it checked, never resolving again.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Iterable, Mapping, Sequence
from urllib.parse import urljoin, urlsplit

from toolops.decisions.authorization import UrlParts, host_matches, normalize_host, url_parts, url_prefix_matches

# The most redirect hops a ToolSpec may allow (``executor.follow_redirects``, default 0).
MAX_REDIRECTS = 5

SCHEME_REFUSED = "scheme_refused"
BAD_URL = "bad_url"
OUT_OF_SCOPE = "egress_out_of_scope"
ADDRESS_DENIED = "egress_address_denied"

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


class EgressRefused(Exception):
    """The request must not be sent; nothing reached the tool (a permanent failure)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class Target:
    url: str
    parts: UrlParts

    @property
    def request_target(self) -> str:
        """Path and query exactly as written: what was scope-checked is what is sent."""
        return self.parts.path + (f"?{self.parts.query}" if self.parts.query else "")

    @property
    def host_header(self) -> str:
        host = f"[{self.parts.host}]" if ":" in self.parts.host else self.parts.host
        default = {"http": 80, "https": 443}[self.parts.scheme]
        return host if self.parts.port == default else f"{host}:{self.parts.port}"


def target_for(url: object) -> Target:
    """The URL as a sendable target, or ``EgressRefused`` before anything leaves."""
    if not isinstance(url, str) or not url:
        raise EgressRefused(BAD_URL, "the tool URL is missing")
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        raise EgressRefused(BAD_URL, "the tool URL cannot be parsed") from None
    if scheme not in ("http", "https"):
        raise EgressRefused(SCHEME_REFUSED, f"only http and https may be requested, not {scheme or 'a relative URL'!r}")
    parts = url_parts(url)
    if parts is None:
        raise EgressRefused(BAD_URL, "the tool URL is not a clean absolute http(s) URL (userinfo, whitespace, bad host or port)")
    return Target(url, parts)


def redirect_target(current: Target, location: object) -> Target:
    """Where a ``Location`` header points, resolved against the current URL and checked again."""
    if not isinstance(location, str) or not location.strip():
        raise EgressRefused(BAD_URL, "a redirect without a usable Location")
    return target_for(urljoin(current.url, location.strip()))


# --- scope -------------------------------------------------------------------------------


def hop_in_scope(target: Target, grants: Iterable[Mapping]) -> bool:
    """Is the URL inside one of the grants' scopes (``scope_kind`` + ``scope_values`` dicts)?"""
    for grant in grants:
        kind, values = grant.get("scope_kind"), [v for v in grant.get("scope_values") or () if isinstance(v, str)]
        if kind == "any":
            return True
        if kind == "url_prefix" and any(url_prefix_matches(v, target.url) for v in values):
            return True
        if kind == "exact" and target.url in values:
            return True
        if kind == "glob" and any(fnmatchcase(target.url, v) for v in values):
            return True
        if kind == "domain_suffix" and target.parts.port == {"http": 80, "https": 443}[target.parts.scheme]:
            suffixes = [s for s in (normalize_host(v.lstrip(".")) for v in values) if s]
            if any(host_matches(target.parts.host, s) for s in suffixes):
                return True
    return False


def openers_from_grants(grants: Iterable[Mapping]) -> set[tuple[str, int]]:
    """``(ip, port)`` pairs the grants name explicitly (URL scopes whose host is an IP literal)."""
    out: set[tuple[str, int]] = set()
    for grant in grants:
        if grant.get("scope_kind") not in ("url_prefix", "exact"):
            continue
        for value in grant.get("scope_values") or ():
            parts = url_parts(value) if isinstance(value, str) else None
            if parts is not None and _ip_or_none(parts.host) is not None:
                out.add((str(ipaddress.ip_address(parts.host)), parts.port))
    return out


def openers_from_allowlist(entries: Sequence[str]) -> set[tuple[str, int]]:
    """The operator's ``host:port`` allow-list (IP literals only; ``[v6]:port`` for IPv6)."""
    out: set[tuple[str, int]] = set()
    for entry in entries:
        parts = url_parts(f"http://{entry.strip()}/") if isinstance(entry, str) and entry.strip() else None
        if parts is None or _ip_or_none(parts.host) is None:
            raise ValueError(f"egress allow-list entry {entry!r} must be IP:PORT (an address, not a host name)")
        out.add((parts.host, parts.port))
    return out


# --- addresses -----------------------------------------------------------------------------


def _ip_or_none(text: str):
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def embedded_ipv4(ip) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4), if any."""
    if ip.version != 6:
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    packed = ip.packed
    if packed[:12] == bytes(12) and int(ip) > 1:  # ::a.b.c.d (deprecated compatible form); not :: or ::1
        return ipaddress.IPv4Address(packed[12:])
    if ip in _NAT64:
        return ipaddress.IPv4Address(packed[12:])
    if ip in _SIXTOFOUR:
        return ipaddress.IPv4Address(packed[2:6])
    return None


def address_denied(address: str) -> str | None:
    """Why ``address`` is on the deny-list (a category name), or None for a public address."""
    ip = _ip_or_none(address)
    if ip is None:
        return "not_an_address"
    inner = embedded_ipv4(ip)
    if inner is not None:
        reason = address_denied(str(inner))
        return f"ipv4_embedded_{reason}" if reason else None
    checks = (
        ("unspecified", ip.is_unspecified), ("loopback", ip.is_loopback), ("link_local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("this_network", ip.version == 4 and ip in _THIS_NETWORK),
        ("shared_cgnat", ip.version == 4 and ip in _SHARED),
        ("unique_local", ip.version == 6 and ip in ipaddress.ip_network("fc00::/7")),
        ("site_local", ip.version == 6 and ip.is_site_local),
        ("private", ip.is_private), ("reserved", ip.is_reserved), ("not_global", not ip.is_global),
    )
    return next((name for name, hit in checks if hit), None)


def check_addresses(target: Target, addresses: Sequence[str], openers: set[tuple[str, int]]) -> str:
    """The address to connect to, after checking *every* resolved address; else ``EgressRefused``.

    Checking all of them (not just the first) means a name that resolves to one public and one
    private address is refused: the client library could otherwise pick either.
    """
    if not addresses:
        raise EgressRefused(BAD_URL, f"{target.parts.host} did not resolve")
    for address in addresses:
        reason = address_denied(address)
        canonical = str(_ip_or_none(address) or address)
        if reason and (canonical, target.parts.port) not in openers:
            raise EgressRefused(
                ADDRESS_DENIED,
                f"{target.parts.host} resolves to a {reason.replace('_', ' ')} address that no grant names explicitly",
            )
    return str(_ip_or_none(addresses[0]))


def literal_address(host: str) -> str | None:
    """The host itself when it is an IP literal (no resolution needed)."""
    ip = _ip_or_none(host)
    return str(ip) if ip is not None else None
