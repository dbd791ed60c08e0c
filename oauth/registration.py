"""Who may register, and with which redirect URIs: dynamic registration (RFC 7591) and Client ID
Metadata Documents (a client_id that is an HTTPS URL).

* Redirect URIs: ``http`` only on a loopback host (desktop clients listen on any port there:
  the toolkit matches loopback IPs port-free, RFC 8252 §7.3), otherwise ``https``, compared
  exactly; never a fragment or credentials.
* Registration is rate limited per client address in the shared cache (``TOOLOPS_OAUTH_REGISTER_RATE``,
  the counters of ``toolops.throttling``).
* A metadata document is fetched with the executors' egress client (``worker.executors.http_client``):
  one checked address (no private, loopback or link-local address), no redirect, a deadline and
  a size cap.
"""
from __future__ import annotations

import json
import re
import time
from urllib.parse import urlsplit

from django.conf import settings
from oauth2_provider.cimd import CIMDError
from oauth2_provider.settings import oauth2_settings

from toolops.decisions.egress import EgressRefused
from toolops.throttling import RateWindow, rate_window
from worker.egress_net import TransportFailure
from worker.executors import http_client

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def redirect_uri_refusal(uri: object) -> str | None:
    """Why ``uri`` may not be a registered redirect URI, or None."""
    if not isinstance(uri, str) or not uri:
        return "a redirect URI must be a non-empty string"
    parts = urlsplit(uri)
    if "#" in uri or "@" in parts.netloc:
        return f"{uri!r}: no fragment and no credentials in a redirect URI"
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return None
    return f"{uri!r}: a redirect URI is https, or http on a loopback address (127.0.0.1, [::1], localhost)"


def redirect_uris_refusal(uris: object) -> str | None:
    if not isinstance(uris, list) or not uris:
        return "redirect_uris must be a non-empty array"
    return next((r for r in map(redirect_uri_refusal, uris) if r), None)


def registration_window(address: str) -> RateWindow | None:
    """The registration-rate window ``address`` counts in now (None: no limit)."""
    return rate_window(f"oauth-register:{address}", settings.TOOLOPS_OAUTH_REGISTER_RATE)


class EgressMetadataFetcher:
    """The toolkit's ``CIMD_METADATA_FETCHER``, over the project's egress client."""

    def fetch(self, client_id: str) -> tuple[dict, int]:
        parts = urlsplit(client_id)
        if parts.scheme != "https" or not parts.hostname or parts.path in ("", "/") or parts.fragment or "@" in parts.netloc:
            raise CIMDError("client_id URL must be https with a path, without fragment or credentials")
        policy = http_client.EgressPolicy(
            deadline=time.monotonic() + oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS,
            max_response_bytes=oauth2_settings.CIMD_MAX_DOCUMENT_SIZE, keep_headers=("cache-control",),
        )
        try:
            response = http_client.send(http_client.HttpRequest("GET", client_id, {"Accept": "application/json"}), policy)
        except (EgressRefused, TransportFailure) as exc:
            raise CIMDError(f"client_id document not fetched: {exc}") from None
        if response.status != 200:
            raise CIMDError(f"client_id document answered HTTP {response.status}")
        if response.truncated:
            raise CIMDError("client_id document exceeds the maximum size")
        media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/json" and not (media_type.startswith("application/") and media_type.endswith("+json")):
            raise CIMDError("client_id document is not JSON")
        try:
            document = json.loads(response.body)
        except ValueError:
            raise CIMDError("client_id document is not valid JSON") from None
        if not isinstance(document, dict):
            raise CIMDError("client_id document must be a JSON object")
        refusal = redirect_uris_refusal(document.get("redirect_uris"))
        if refusal:
            raise CIMDError(refusal)
        return document, _cache_seconds(response.headers.get("cache-control") or "")


def _cache_seconds(cache_control: str) -> int:
    """How long the document is kept: its ``max-age`` (``no-store``/``no-cache``: the minimum),
    within the toolkit's ``CIMD_METADATA_MIN_AGE_SECONDS`` … ``CIMD_METADATA_MAX_AGE_SECONDS``."""
    low, high = oauth2_settings.CIMD_METADATA_MIN_AGE_SECONDS, oauth2_settings.CIMD_METADATA_MAX_AGE_SECONDS
    if "no-store" in cache_control.lower() or "no-cache" in cache_control.lower():
        return low
    match = re.search(r"max-age\s*=\s*(\d+)", cache_control, re.IGNORECASE)
    return max(low, min(int(match.group(1)) if match else high, high))
