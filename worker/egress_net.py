"""The egress steps that do I/O, shared by every way ToolOps opens a connection to a tool.

docs/concepts/admission.md Egress: http(s) only, the host resolved **once**, every address checked against the
deny-list (loopback, private, link-local, … opened only by a grant or the operator naming that
IP and port) and the connection made to the checked address. The HTTP executor
(``worker.executors.http_client``), the MCP executor (``worker.executors.mcp``) and the
MCP import and refresh (``worker.upstream_sync``) all check through here, so an upstream URL
cannot reach an address the operator did not open whichever of them uses it.

``operator_openers`` is the operator's allow-list (``TOOLOPS_EGRESS_ALLOW``) and nothing else:
no private address is open by default — not the demo services' (``TOOLOPS_DEMO_SERVICES_URL``,
which the demo ToolSpecs call) nor the demo notes MCP server's. ``make run`` names both in the
allow-list of the processes it starts (``run_console.demo_egress_allow``); tests and benches that
run the demo services open them the same way (``allow_with``). Webhook delivery has its own
list, ``webhook_openers`` (``TOOLOPS_WEBHOOK_EGRESS_ALLOW``), and shares nothing with the tools'.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from urllib.parse import urlsplit

from django.conf import settings

from worker.executors.mcp_client import Pin
from toolops.decisions.egress import Target, check_addresses, literal_address, openers_from_allowlist, target_for

logger = logging.getLogger(__name__)


class TransportFailure(Exception):
    """No usable answer. ``reached``: the request may have arrived (the tool may have acted)."""

    def __init__(self, message: str, *, reached: bool, deadline: bool = False) -> None:
        super().__init__(message)
        self.message, self.reached, self.deadline = message, reached, deadline


def operator_openers() -> frozenset[tuple[str, int]]:
    """The (address, port) pairs the operator lets ToolSpec-fixed endpoints and MCP upstreams
    reach although they are private: exactly ``TOOLOPS_EGRESS_ALLOW`` (empty by default). The
    demo services' address is not among them unless the operator names it."""
    return _openers("TOOLOPS_EGRESS_ALLOW")


def webhook_openers() -> frozenset[tuple[str, int]]:
    """The (address, port) pairs webhook receivers may be reached on although private: exactly
    ``TOOLOPS_WEBHOOK_EGRESS_ALLOW`` (empty by default), never the tools' list — an address
    opened for a tool is not thereby open to a webhook endpoint's URL."""
    return _openers("TOOLOPS_WEBHOOK_EGRESS_ALLOW")


def _openers(setting: str) -> frozenset[tuple[str, int]]:
    entries = list(getattr(settings, setting, ()) or ())
    try:
        return frozenset(openers_from_allowlist(entries))
    except ValueError:  # settings checks the environment at start; this is a value set since
        logger.warning("%s names a host, not an address: ignored", setting)
        return frozenset()


def allow_with(entries, *urls: str) -> list[str]:
    """The allow-list ``entries`` plus the ``IP:PORT`` of each URL (with an explicit port), each
    once, in order — how ``make run``, tests and benches open the demo addresses explicitly."""
    out = list(entries or ())
    for url in urls:
        address = host_port(url)
        if address and address not in out:
            out.append(address)
    return out


def host_port(url: str) -> str | None:
    """``IP:PORT`` (``[v6]:PORT``) of a URL with an explicit port, as the allow-list spells it."""
    base = urlsplit(url)
    if not (base.hostname and base.port):
        return None
    return f"[{base.hostname}]:{base.port}" if ":" in base.hostname else f"{base.hostname}:{base.port}"


def resolve(target: Target, deadline: float) -> list[str]:
    """Every address of the host, resolved once (an IP literal is its own address)."""
    literal = literal_address(target.parts.host)
    if literal is not None:
        return [literal]
    answer: dict[str, object] = {}
    done = threading.Event()

    def lookup() -> None:  # getaddrinfo has no timeout of its own: the deadline bounds the wait
        try:
            answer["infos"] = socket.getaddrinfo(target.parts.host, target.parts.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            answer["error"] = exc
        finally:
            done.set()

    threading.Thread(target=lookup, name="resolve", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise TransportFailure(f"resolving {target.parts.host} outlasted the attempt deadline", reached=False, deadline=True)
    if "error" in answer:
        raise TransportFailure(f"cannot resolve {target.parts.host} ({type(answer['error']).__name__})", reached=False)
    seen: dict[str, None] = {}
    for info in answer["infos"]:
        seen.setdefault(info[4][0], None)
    return list(seen)


def checked_address(url: str, openers: frozenset[tuple[str, int]], deadline: float) -> tuple[Target, str]:
    """For a client that does its own I/O (the SDK's MCP client): the URL as a target and the
    one checked address to connect to; ``EgressRefused`` (nothing sent) or ``TransportFailure``."""
    target = target_for(url)
    return target, check_addresses(target, resolve(target, deadline), set(openers))


def mcp_pin(url: str, openers: frozenset[tuple[str, int]], deadline: float) -> Pin:
    """Where an upstream MCP server may be reached: its checked address, for the SDK client's
    pinned transport (``worker.executors.mcp_client``: that origin only, no redirects, a byte cap)."""
    target, address = checked_address(url, openers, deadline)
    return Pin(target.parts.scheme, target.parts.host, target.parts.port, address)
