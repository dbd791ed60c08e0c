"""Small keyword-only builders for test data (instead of copy-pasted setup)."""
from __future__ import annotations

import itertools
import json

from specs_app.models import Capability, Grant, Subject, Tenant, ToolSpec
from specs_app.services import api_token_issue, toolspec_publish

_seq = itertools.count(1)

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def make_tenant(*, slug: str | None = None) -> Tenant:
    slug = slug or f"tenant-{next(_seq)}"
    return Tenant.objects.create(slug=slug, name=slug.title())


def make_subject(*, tenant: Tenant | None = None, name: str | None = None) -> Subject:
    return Subject.objects.create(tenant=tenant or make_tenant(), name=name or f"agent-{next(_seq)}")


def make_token(*, subject: Subject | None = None) -> tuple[Subject, str]:
    subject = subject or make_subject()
    _, secret = api_token_issue(subject=subject, label="test")
    return subject, secret


def make_toolspec(
    *,
    name: str = "weather.get_forecast",
    version: int = 1,
    schema: dict | None = None,
    normalizers: list | None = None,
    side_effect_class: str = "read_only",
    format_assertion: bool = False,
    publish: bool = True,
    required_capabilities: list | None = None,
    **extra,
) -> ToolSpec:
    if required_capabilities is None:
        make_capability(name="weather.read", operation_class="read")
        required_capabilities = [{"capability": "weather.read", "resource_pointer": "/city"}]
    spec = ToolSpec.objects.create(
        required_capabilities=required_capabilities,
        name=name,
        version=version,
        description=f"{name} for tests",
        input_schema=schema
        or {
            "$schema": DIALECT,
            "type": "object",
            "properties": {"city": {"type": "string"}, "date": {"type": "string", "format": "date"}},
            "required": ["city", "date"],
            "additionalProperties": False,
        },
        normalizers=[{"pointer": "/date", "normalizer": "date"}] if normalizers is None else normalizers,
        side_effect_class=side_effect_class,
        format_assertion=format_assertion,
        **extra,
    )
    return toolspec_publish(spec=spec) if publish else spec


def make_capability(*, name: str, operation_class: str = "read") -> Capability:
    return Capability.objects.get_or_create(name=name, defaults={"operation_class": operation_class})[0]


def make_grant(
    *,
    capability: str = "weather.read",
    operation_class: str = "read",
    tenant: Tenant | None = None,
    subject: Subject | None = None,
    scope_kind: str = "any",
    scope_values: list | None = None,
    effect: str = "allow",
    limits: dict | None = None,
    tool_refs: list | None = None,
    **extra,
) -> Grant:
    return Grant.objects.create(
        capability=make_capability(name=capability, operation_class=operation_class),
        tenant=tenant or subject.tenant, subject=subject, scope_kind=scope_kind, scope_values=scope_values or [],
        effect=effect, limits=limits or {}, tool_refs=tool_refs or [], reason="test grant", **extra,
    )


class Agent:
    """An API client for one subject: wraps DRF's APIClient with the bearer token."""

    def __init__(self, client, token: str):
        self.client, self.token = client, token

    def _auth(self, headers):
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}", **(headers or {})}

    def get(self, path, headers=None, **params):
        return self.client.get(path, params, **self._auth(headers))

    def post(self, path, body=None, headers=None):
        return self.client.post(path, json.dumps(body or {}), content_type="application/json", **self._auth(headers))

    def run(self, **body) -> dict:
        resp = self.post("/api/v1/runs", {"timezone": "Asia/Shanghai", **body})
        assert resp.status_code == 201, resp.content
        return resp.json()

    def model_call(self, run_id: str, **body) -> dict:
        resp = self.post(f"/api/v1/runs/{run_id}/model-calls", body)
        assert resp.status_code == 201, resp.content
        return resp.json()

    def propose(self, model_call_id: str, *, name: str, arguments: str | None = None, proposal_id: str | None = None, **extra):
        body = {"proposal_id": proposal_id or f"call_{next(_seq)}", "name": name, **extra}
        if arguments is not None:
            body["arguments"] = arguments
        return self.post(f"/api/v1/model-calls/{model_call_id}/proposals", body)
