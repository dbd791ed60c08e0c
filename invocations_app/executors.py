"""Executors: run one attempt of an invocation against the real tool, and look effects up.

Two kinds, chosen by ``ToolSpec.executor["kind"]``:

* ``python``: a dotted path to ``fn(arguments: dict, ctx: AttemptContext) -> ExecutionOutcome | dict``
  (a plain dict is a successful value).
* ``mcp``: a tool on an upstream MCP server (``mcp_upstream``; issue 16).
* ``http``: a generic HTTP executor configured in the ToolSpec — method, URL template, headers
  whose secret values live server-side (``"secret:NAME"`` → ``settings.TOOLOPS_TOOL_SECRETS``),
  the idempotency header, a status → outcome mapping, a lookup URL template, a per-attempt
  timeout. Every request carries the attempt's ``traceparent``.

Executors never touch the database: the worker records what they return.
"""
from __future__ import annotations

import importlib
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import requests
from django.conf import settings

from toolops.runtime.execution import Commit, ExecutionOutcome, LookupOutcome, outcome_for_status
from toolops.runtime.requirements import resolve_pointer

from . import mcp_upstream

logger = logging.getLogger(__name__)

_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass(frozen=True)
class AttemptContext:
    invocation_id: str
    tool_ref: str
    side_effect_class: str
    attempt: int
    idempotency_key: str
    traceparent: str
    timeout_seconds: float


def tool_secrets() -> dict[str, str]:
    return dict(getattr(settings, "TOOLOPS_TOOL_SECRETS", {}) or {})


def secret_values(config: dict) -> list[str]:
    """The literal secret values an executor config refers to (for redaction)."""
    if config.get("kind") == "mcp":
        return mcp_upstream.secret_values(config)
    secrets = tool_secrets()
    names = [v.split(":", 1)[1] for v in (config.get("headers") or {}).values() if isinstance(v, str) and v.startswith("secret:")]
    return [secrets[n] for n in names if secrets.get(n)]


def execute(*, config: dict, arguments: Any, ctx: AttemptContext) -> ExecutionOutcome:
    kind = config.get("kind")
    if kind == "python":
        return _execute_python(config, arguments, ctx)
    if kind == "http":
        return _execute_http(config, arguments, ctx)
    if kind == "mcp":
        return mcp_upstream.execute_mcp(config=config, arguments=arguments, ctx=ctx)
    return ExecutionOutcome(
        commit=Commit.NOT_COMMITTED if ctx.side_effect_class != "read_only" else Commit.NOT_APPLICABLE,
        failure_class="not_reached", error={"code": "no_executor", "message": f"tool has no executor (kind={kind!r})"},
    )


def lookup(*, config: dict, arguments: Any, ctx: AttemptContext) -> LookupOutcome:
    """Ask the tool whether the effect exists (reconciliation). Unknown when it cannot tell."""
    spec = config.get("lookup")
    if not spec:
        return LookupOutcome(committed=None, detail={"reason": "tool offers no lookup"})
    if config.get("kind") == "python":
        return _import(spec)(arguments, ctx)
    if config.get("kind") == "mcp":
        return mcp_upstream.lookup_mcp(config=config, arguments=arguments, ctx=ctx)
    url = _render_url(spec["url"], arguments, ctx)
    try:
        resp = requests.request(spec.get("method", "GET"), url, headers=_headers(config, ctx), timeout=ctx.timeout_seconds)
    except requests.RequestException as exc:
        return LookupOutcome(committed=None, detail={"error": type(exc).__name__})
    if resp.status_code == int(spec.get("found", 200)):
        body = _json(resp)
        return LookupOutcome(committed=True, external_resource_id=_resource_id(config, body), value=body, detail={"status": 200})
    if resp.status_code == int(spec.get("absent", 404)):
        return LookupOutcome(committed=False, detail={"status": resp.status_code})
    return LookupOutcome(committed=None, detail={"status": resp.status_code})


# --- python ---------------------------------------------------------------------------------

def _import(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _execute_python(config: dict, arguments: Any, ctx: AttemptContext) -> ExecutionOutcome:
    result = _import(config["callable"])(arguments, ctx)
    if isinstance(result, ExecutionOutcome):
        return result
    commit = Commit.NOT_APPLICABLE if ctx.side_effect_class == "read_only" else Commit.COMMITTED
    return ExecutionOutcome(commit=commit, value=result)


# --- http -----------------------------------------------------------------------------------

def _render_url(template: str, arguments: Any, ctx: AttemptContext) -> str:
    values = {"base": settings.TOOLOPS_DEMO_SERVICES_URL.rstrip("/"), "idempotency_key": ctx.idempotency_key}
    if isinstance(arguments, dict):
        values.update({k: v for k, v in arguments.items() if isinstance(v, (str, int, float))})

    def sub(m: re.Match) -> str:
        name = m.group(1)
        value = str(values[name])
        return value if name == "base" else quote(value, safe="")

    if template.strip() in ("{url}",):
        return str(values["url"])  # a tool whose argument *is* the URL (web.fetch); scope-checked by grants
    return _PLACEHOLDER.sub(sub, template)


def _headers(config: dict, ctx: AttemptContext) -> dict[str, str]:
    headers = {"traceparent": ctx.traceparent, "User-Agent": "ToolOps/1"}
    secrets = tool_secrets()
    for name, value in (config.get("headers") or {}).items():
        if isinstance(value, str) and value.startswith("secret:"):
            value = secrets.get(value.split(":", 1)[1], "")
        headers[name] = value
    if config.get("idempotency_header") and ctx.side_effect_class == "write_idempotent":
        headers[config["idempotency_header"]] = ctx.idempotency_key
    return headers


def _body(config: dict, arguments: Any) -> Any:
    fields = config.get("body_fields")
    if fields is None or not isinstance(arguments, dict):
        return arguments
    return {name: resolve_pointer(arguments, pointer)[1] for name, pointer in fields.items() if resolve_pointer(arguments, pointer)[0]}


def _json(resp) -> Any:
    if "json" in resp.headers.get("Content-Type", ""):
        try:
            return resp.json()
        except ValueError:
            return None
    return None


def _resource_id(config: dict, body: Any) -> str | None:
    pointer = config.get("resource_id_pointer")
    if not pointer or body is None:
        return None
    found, value = resolve_pointer(body, pointer)
    return str(value) if found and value is not None else None


def _execute_http(config: dict, arguments: Any, ctx: AttemptContext) -> ExecutionOutcome:
    method = config.get("method", "POST").upper()
    url = _render_url(config["url"], arguments, ctx)
    kwargs: dict[str, Any] = {"headers": _headers(config, ctx), "timeout": ctx.timeout_seconds}
    if method not in ("GET", "HEAD", "DELETE"):
        kwargs["json"] = _body(config, arguments)
    try:
        resp = requests.request(method, url, **kwargs)
    except requests.ConnectionError as exc:
        return _transport_failure(exc, ctx, reached=_maybe_reached(exc))
    except requests.Timeout as exc:
        return _transport_failure(exc, ctx, reached=not isinstance(exc, requests.ConnectTimeout))
    except requests.RequestException as exc:
        return _transport_failure(exc, ctx, reached=True)
    return _from_response(config, resp, ctx)


def _maybe_reached(exc: requests.ConnectionError) -> bool:
    # Refused / unresolvable: the request provably never left. A reset or a closed socket
    # after sending: the tool may have acted.
    text = repr(exc)
    return not any(s in text for s in ("Connection refused", "NewConnectionError", "Name or service not known", "ConnectTimeout"))


def _transport_failure(exc: Exception, ctx: AttemptContext, *, reached: bool) -> ExecutionOutcome:
    read_only = ctx.side_effect_class == "read_only"
    if not reached:
        commit, failure = (Commit.NOT_APPLICABLE if read_only else Commit.NOT_COMMITTED), "not_reached"
    else:
        commit, failure = (Commit.NOT_APPLICABLE if read_only else Commit.UNKNOWN), "timeout_unknown"
    return ExecutionOutcome(
        commit=commit, failure_class=failure,
        error={"code": "outcome_unknown" if failure == "timeout_unknown" else "not_reached",
               "message": f"{type(exc).__name__} talking to the tool"},
    )


def _from_response(config: dict, resp, ctx: AttemptContext) -> ExecutionOutcome:
    commit, failure = outcome_for_status(
        status=resp.status_code, side_effect_class=ctx.side_effect_class, status_map=config.get("status_map")
    )
    body = _json(resp)
    if failure is None:
        value = body if body is not None else {"content_type": resp.headers.get("Content-Type", ""), "text": resp.text}
        untrusted = tuple(config.get("untrusted_pointers") or (() if body is not None else ("/text",)))
        return ExecutionOutcome(
            commit=commit, value=value, external_resource_id=_resource_id(config, body), http_status=resp.status_code,
            untrusted_text_pointers=untrusted,
        )
    retry_after = resp.headers.get("Retry-After")
    message = (body or {}).get("message") or (body or {}).get("error") or resp.reason
    return ExecutionOutcome(
        commit=commit, failure_class=failure, http_status=resp.status_code,
        retry_after_seconds=float(retry_after) if retry_after and retry_after.isdigit() else None,
        error={"code": "business_rejected" if failure == "business_rejected" else failure, "message": str(message)[:500],
               "http_status": resp.status_code},
    )
