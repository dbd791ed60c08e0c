"""The ``http`` executor: a URL template filled from the arguments, headers with the tool's
credentials, sent through the pinned, streamed client (``http_client``) under the grants' egress
scope; the status and body become an outcome by the tool's declared rules.
"""
from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any
from urllib.parse import quote

from django.conf import settings

from toolops.decisions.egress import MAX_REDIRECTS, EgressRefused
from toolops.decisions.execution import (Commit, ExecutionOutcome, LookupOutcome, outcome_for_status, parse_retry_after)
from toolops.decisions.requirements import resolve_pointer
from toolops.model_io.media import binary_body, decode_text, holds_nul
from toolops.runtime.parser import ParseRejected, parse_strict
from toolops.tool_secrets import tool_secrets
from worker.egress_net import operator_openers
from worker.executors import http_client
from worker.executors.context import AttemptContext, int_or
from worker.executors.http_client import EgressPolicy, HttpRequest, HttpResponse, TransportFailure

logger = logging.getLogger(__name__)


COST_RE = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,6})?")


_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


# A template whose scheme and authority are written out (or are the operator's ``{base}``) sends
# to a fixed origin; any other (``{url}``) takes its URL from the model and needs URL grants.
_FIXED_ORIGIN = re.compile(r"^(\{base\}(/|$)|https?://[^{}/?#]+(/|$))", re.IGNORECASE)


def lookup_http(config: dict, spec: dict, arguments: Any, ctx: AttemptContext) -> LookupOutcome:
    """The HTTP tool's lookup: its ``found`` status means committed, ``absent`` not committed."""
    try:
        url = _render_url(spec["url"], arguments, ctx)
        resp = http_client.send(
            HttpRequest(spec.get("method", "GET"), url, _headers(config, ctx), secret_headers=_secret_headers(config)),
            _policy(config, spec["url"], ctx),
        )
    except EgressRefused as exc:
        return LookupOutcome(committed=None, detail={"reason": f"the egress policy refused the lookup ({exc.code})"})
    except TransportFailure as exc:
        why = "the tool did not answer in time" if exc.reached else "the tool could not be reached"
        return LookupOutcome(committed=None, detail={"reason": why})
    except (KeyError, TypeError, ValueError) as exc:
        return LookupOutcome(committed=None, detail={"error": type(exc).__name__})
    if resp.status == int_or(spec.get("found"), 200):
        body = _json(resp)
        pointer_config = {"resource_id_pointer": spec.get("resource_id_pointer", config.get("resource_id_pointer"))}
        return LookupOutcome(committed=True, external_resource_id=_resource_id(pointer_config, body), value=body,
                             detail={"status": resp.status})
    if resp.status == int_or(spec.get("absent"), 404):
        return LookupOutcome(committed=False, detail={"status": resp.status})
    return LookupOutcome(committed=None, detail={"status": resp.status})


def _render_url(template: str, arguments: Any, ctx: AttemptContext) -> str:
    # ``{idempotency_key}`` in a URL is what the remote knows the call by: the derived key.
    values = {"base": settings.TOOLOPS_DEMO_SERVICES_URL.rstrip("/"), "idempotency_key": ctx.remote_key,
              "remote_key": ctx.remote_key}
    if isinstance(arguments, dict):
        values.update({k: v for k, v in arguments.items()
                       if isinstance(v, (str, int, float)) and k not in ("base", "idempotency_key", "remote_key")})

    def sub(m: re.Match) -> str:
        name = m.group(1)
        value = str(values[name])
        return value if name == "base" else quote(value, safe="")

    if template.strip() in ("{url}",):
        return str(values["url"])  # a tool whose argument *is* the URL (web.fetch); every hop is scope-checked
    return _PLACEHOLDER.sub(sub, template)


def _headers(config: dict, ctx: AttemptContext) -> dict[str, str]:
    headers = {"traceparent": ctx.traceparent, "User-Agent": "ToolOps/1"}
    secrets = tool_secrets()
    for name, value in (config.get("headers") or {}).items():
        if isinstance(value, str) and value.startswith("secret:"):
            value = secrets.get(value.split(":", 1)[1], "")
        headers[name] = str(value)
    if config.get("idempotency_header") and ctx.side_effect_class == "write_idempotent" and ctx.remote_key:
        headers[config["idempotency_header"]] = ctx.remote_key
    if config.get("client_reference_header") and ctx.side_effect_class != "read_only" and ctx.remote_key:
        headers[config["client_reference_header"]] = ctx.remote_key
    return headers


def _secret_headers(config: dict) -> frozenset[str]:
    names = set(http_client.secret_header_names(config.get("headers")))
    names.update(h.lower() for h in (config.get("idempotency_header"), config.get("client_reference_header")) if h)
    return frozenset(names)


def _policy(config: dict, template: str, ctx: AttemptContext) -> EgressPolicy:
    from_arguments = not _FIXED_ORIGIN.match(template.strip())
    return EgressPolicy(
        deadline=ctx.attempt_deadline(), max_response_bytes=ctx.max_response_bytes,
        follow_redirects=max(0, min(MAX_REDIRECTS, int_or(config.get("follow_redirects"), 0))),
        url_from_arguments=from_arguments, grants=tuple(ctx.egress_grants),
        # The operator's allow-list opens only endpoints the ToolSpec fixes, never a model's URL.
        openers=frozenset() if from_arguments else operator_openers(),
        keep_headers=(config["cost_header"].lower(),) if isinstance(config.get("cost_header"), str) else (),
    )


def _body(config: dict, arguments: Any) -> Any:
    fields = config.get("body_fields")
    if fields is None or not isinstance(arguments, dict):
        return arguments
    return {name: resolve_pointer(arguments, pointer)[1] for name, pointer in fields.items() if resolve_pointer(arguments, pointer)[0]}


def _json(resp: HttpResponse) -> Any:
    """The body as JSON when it says it is JSON and parses strictly (whole, not truncated)."""
    if resp.truncated or "json" not in resp.headers.get("content-type", "").lower():
        return None
    try:
        return parse_strict(resp.body)
    except ParseRejected:
        return None


def _resource_id(config: dict, body: Any) -> str | None:
    pointer = config.get("resource_id_pointer")
    if not pointer or body is None:
        return None
    try:
        found, value = resolve_pointer(body, pointer)
    except (ValueError, TypeError):
        return None
    if not found or value is None or isinstance(value, (dict, list)):
        return None
    return str(value)[:200]


def execute_http(config: dict, arguments: Any, ctx: AttemptContext) -> ExecutionOutcome:
    method = str(config.get("method", "POST")).upper()
    try:
        url = _render_url(str(config.get("url", "")), arguments, ctx)
        body = None if method in ("GET", "HEAD", "DELETE") else json.dumps(
            _body(config, arguments), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = _headers(config, ctx)
        if body is not None:
            headers["Content-Type"] = "application/json"
        resp = http_client.send(HttpRequest(method, url, headers, body, _secret_headers(config)),
                                _policy(config, str(config.get("url", "")), ctx))
    except EgressRefused as exc:
        return _refused(exc.code, exc.message, ctx)
    except (KeyError, TypeError, ValueError) as exc:  # a template or argument that makes no URL
        return _refused("bad_url", f"cannot build the request ({type(exc).__name__})", ctx)
    except TransportFailure as exc:
        return _transport_failure(exc, ctx)
    return _from_response(config, resp, ctx)


def _refused(code: str, message: str, ctx: AttemptContext) -> ExecutionOutcome:
    """Refused before sending: nothing reached the tool, and asking again changes nothing."""
    read_only = ctx.side_effect_class == "read_only"
    return ExecutionOutcome(
        commit=Commit.NOT_APPLICABLE if read_only else Commit.NOT_COMMITTED, failure_class="permanent",
        error={"code": code, "message": message, "reached": False},
    )


def _transport_failure(exc: TransportFailure, ctx: AttemptContext) -> ExecutionOutcome:
    read_only = ctx.side_effect_class == "read_only"
    if not exc.reached:
        commit, failure = (Commit.NOT_APPLICABLE if read_only else Commit.NOT_COMMITTED), "not_reached"
    else:
        commit, failure = (Commit.NOT_APPLICABLE if read_only else Commit.UNKNOWN), "timeout_unknown"
    code = "deadline_exceeded" if exc.deadline else ("outcome_unknown" if failure == "timeout_unknown" else "not_reached")
    return ExecutionOutcome(commit=commit, failure_class=failure, error={"code": code, "message": exc.message})


def _reported_cost(config: dict, resp: HttpResponse) -> str | None:
    """The cost the tool reported in the ToolSpec's ``cost_header`` (a non-negative decimal), or None.

    Only a header the ToolSpec names counts: an arbitrary server cannot charge the run."""
    name = config.get("cost_header")
    if not isinstance(name, str) or not name:
        return None
    raw = resp.headers.get(name.lower(), "").strip()
    # A plain decimal the run's counter can hold (18 digits, 6 after the point): no sign, no exponent.
    return str(Decimal(raw)) if COST_RE.fullmatch(raw) else None


def _from_response(config: dict, resp: HttpResponse, ctx: AttemptContext) -> ExecutionOutcome:
    status_map = config.get("status_map") if isinstance(config.get("status_map"), dict) else None
    commit, failure = outcome_for_status(status=resp.status, side_effect_class=ctx.side_effect_class, status_map=status_map)
    body = _json(resp)
    if holds_nul(body):
        body = None  # kept as its JSON text, where the NUL stays an escape (jsonb cannot store U+0000)
    detail = {"bytes_read": len(resp.body)}
    if resp.truncated:
        detail["response_truncated"] = True
    if len(resp.hops) > 1:
        detail["redirects"] = len(resp.hops) - 1
    if failure is None and resp.truncated and ctx.oversize == "reject" and commit != Commit.COMMITTED:
        return ExecutionOutcome(
            commit=commit, failure_class="permanent", http_status=resp.status, detail=detail,
            error={"code": "response_too_large", "message": f"the response exceeds {ctx.max_response_bytes} bytes"},
        )
    if failure is None:
        text = None if body is not None else _text(resp)
        if body is None and text is None:  # bytes, never decoded: the worker stores them (results.py)
            return ExecutionOutcome(
                commit=commit, http_status=resp.status, detail=detail,
                binary=binary_body(resp.headers.get("content-type"), resp.body, truncated=resp.truncated),
            )
        if body is not None:
            value = body
        else:
            value = {"content_type": resp.headers.get("content-type", "")[:200], "text": text}
            if resp.truncated:
                value["truncated_at_bytes"] = ctx.max_response_bytes
        return ExecutionOutcome(
            commit=commit, value=value, external_resource_id=_resource_id(config, body), http_status=resp.status,
            detail=detail, cost=_reported_cost(config, resp),  # all of it is outside text: results.py wraps it (result_policy.untrusted_text)
        )
    remote = None
    if isinstance(body, dict):
        remote = next((body[k] for k in ("message", "error") if isinstance(body.get(k), str)), None)
    message = f"the tool answered HTTP {resp.status}"
    if resp.status in http_client.REDIRECT_STATUSES:
        message, remote = "the tool answered with a redirect this ToolSpec does not follow", None
    error = {"code": "business_rejected" if failure == "business_rejected" else failure, "message": message,
             "http_status": resp.status}
    if remote or resp.reason:
        # The remote's own words are outside text: the model reads them only as untrusted data.
        error["remote_message"] = str(remote or resp.reason)[:500]
    return ExecutionOutcome(
        commit=commit, failure_class=failure, http_status=resp.status, detail=detail,
        retry_after_seconds=parse_retry_after(resp.headers.get("retry-after"), now=datetime.now(timezone.utc)),
        cost=_reported_cost(config, resp), error=error,
        untrusted_text_pointers=("/remote_message",) if "remote_message" in error else (),
    )


def _text(resp: HttpResponse) -> str | None:
    """The body as text, or None when it is bytes (``toolops.model_io.media``)."""
    if resp.headers.get("content-encoding", "identity").lower() not in ("identity", ""):
        return None  # compressed despite Accept-Encoding: identity — never inflated (no bombs): bytes
    return decode_text(resp.headers.get("content-type"), resp.body, truncated=resp.truncated)
