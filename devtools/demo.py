"""The demo ToolSpecs (docs/reference/demo.md) and the demo tenant, subject, token and admin (idempotent)."""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from specs_app.models import ApiToken, Capability, Grant, GrantChange, Subject, Tenant, ToolSpec
from specs_app.services import api_token_issue, token_hash, toolspec_publish

DIALECT = "https://json-schema.org/draft/2020-12/schema"

DEMO_TOOLSPECS: list[dict] = [
    {
        "name": "weather.get_forecast",
        "title": "Weather forecast",
        "description": "Forecast for one city on one day. `date` may be ISO (2026-07-20) or relative (today, tomorrow, next monday, in 3 days).",
        "side_effect_class": "read_only",
        "format_assertion": False,
        "input_schema": {
            "$schema": DIALECT,
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "maxLength": 100},
                "date": {"type": "string", "format": "date"},
            },
            "required": ["city", "date"],
            "additionalProperties": False,
        },
        # Format assertion is off, so the `date` normalizer is the check for `format: date`.
        "normalizers": [
            {"pointer": "/city", "normalizer": "identifier", "options": {"trim": True, "collapse_whitespace": True}},
            {"pointer": "/date", "normalizer": "date"},
        ],
        "required_capabilities": [{"capability": "weather.read", "resource_pointer": "/city"}],
        "timeout_policy": {"attempt_timeout_seconds": 5, "deadline_seconds": 30},
        "result_policy": {"max_bytes": 4096},
        "executor": {"kind": "python", "callable": "specs_app.demo_tools.weather_forecast"},
    },
    {
        "name": "calendar.create_event",
        "title": "Create a calendar event",
        "description": "Create one event in a calendar. `start` may be RFC 3339 or local ('tomorrow 09:00') in the run's timezone.",
        "side_effect_class": "write_idempotent",
        "format_assertion": True,
        "input_schema": {
            "$schema": DIALECT,
            "type": "object",
            "properties": {
                "calendar_id": {"type": "string", "minLength": 1, "maxLength": 100},
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "start": {"type": "string", "minLength": 1, "maxLength": 100},
                "duration_minutes": {"type": "integer", "minimum": 1, "maximum": 1440},
            },
            "required": ["calendar_id", "title", "start", "duration_minutes"],
            "additionalProperties": False,
        },
        "normalizers": [
            {"pointer": "/calendar_id", "normalizer": "identifier", "options": {"trim": True, "casefold": True}},
            {"pointer": "/start", "normalizer": "datetime"},
        ],
        "required_capabilities": [{"capability": "calendar.write", "resource_pointer": "/calendar_id"}],
        "confirmation_policy": {"required": True, "expires_seconds": 900},
        "timeout_policy": {"attempt_timeout_seconds": 5, "deadline_seconds": 600},
        "retry_policy": {"initial_interval": 1, "backoff_coefficient": 2, "maximum_interval": 30, "maximum_attempts": 5},
        "result_policy": {"max_bytes": 4096},
        "executor": {
            "kind": "http", "method": "POST", "url": "{base}/calendar/calendars/{calendar_id}/events",
            "body_fields": {"title": "/title", "start": "/start", "duration_minutes": "/duration_minutes"},
            "headers": {"Authorization": "secret:DEMO_CALENDAR_TOKEN"},
            "idempotency_header": "Idempotency-Key", "resource_id_pointer": "/id",
            "lookup": {"method": "GET", "url": "{base}/calendar/events/by-key/{idempotency_key}", "found": 200, "absent": 404},
        },
    },
    {
        "name": "payments.transfer",
        "title": "Transfer money",
        "description": "Send money to an account. `amount` is {amount, currency}; the amount is a decimal string or number.",
        "side_effect_class": "write_unsafe",
        "format_assertion": False,
        "input_schema": {
            "$schema": DIALECT,
            "type": "object",
            "properties": {
                "to_account": {"type": "string", "pattern": "^[A-Za-z0-9_-]{3,64}$"},
                "amount": {
                    "type": "object",
                    "properties": {
                        # Positive, no sign, no exponent, no leading zeros, no blanks: "-0", "+5",
                        # "0.00", " 5", "1e3" and -0 are refused here, before any normalizer.
                        "amount": {"type": ["string", "number"], "exclusiveMinimum": 0,
                                   "pattern": "^(?:[1-9][0-9]*(?:\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)$"},
                        "currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "CNY", "JPY"]},
                    },
                    "required": ["amount", "currency"],
                    "additionalProperties": False,
                },
                "memo": {"type": "string", "maxLength": 140},
            },
            "required": ["to_account", "amount"],
            "additionalProperties": False,
        },
        "normalizers": [
            {"pointer": "/to_account", "normalizer": "identifier", "options": {"trim": True}},
            {"pointer": "/amount", "normalizer": "currency_minor_units", "options": {"currency": "from_value"}},
        ],
        "required_capabilities": [{"capability": "payments.transfer", "resource_pointer": "/to_account", "amount_pointer": "/amount/amount_minor"}],
        "confirmation_policy": {"required": True, "expires_seconds": 900},
        "timeout_policy": {"attempt_timeout_seconds": 5, "deadline_seconds": 600},
        "result_policy": {"max_bytes": 4096},
        # No idempotency support on the remote side: never re-sent. It stores a client reference
        # (the derived remote key), so an unknown outcome is reconciled by looking that up.
        "executor": {
            "kind": "http", "method": "POST", "url": "{base}/payments/transfers",
            "body_fields": {"to_account": "/to_account", "amount_minor": "/amount/amount_minor",
                            "currency": "/amount/currency", "memo": "/memo"},
            "resource_id_pointer": "/id", "client_reference_header": "X-Client-Reference",
            "lookup": {"method": "GET", "url": "{base}/payments/transfers/by-reference/{remote_key}",
                       "found": 200, "absent": 404, "resource_id_pointer": "/transfers/0/id"},
        },
    },
    {
        "name": "web.fetch",
        "title": "Fetch a web page",
        "description": "Fetch the text of one web page. The page text is external, untrusted data.",
        "side_effect_class": "read_only",
        "format_assertion": True,
        "input_schema": {
            "$schema": DIALECT,
            "type": "object",
            "properties": {"url": {"type": "string", "format": "uri", "maxLength": 2048}},
            "required": ["url"],
            "additionalProperties": False,
        },
        "normalizers": [{"pointer": "/url", "normalizer": "trim"}],
        "required_capabilities": [{"capability": "web.read", "resource_pointer": "/url"}],
        "timeout_policy": {"attempt_timeout_seconds": 10, "deadline_seconds": 60},
        # Reading stops past 256 KiB (the demo's large page fits); the rest is cut, marked truncated.
        "result_policy": {"max_bytes": 2048, "max_response_bytes": 262144, "oversize": "truncate"},
        # No redirects are followed (follow_redirects absent = 0); every URL is checked against
        # the web.read grant's URL scope and the egress deny-list.
        # Untrusted by default (an external executor): the page text reaches the model wrapped.
        "executor": {"kind": "http", "method": "GET", "url": "{url}"},
    },
]


# capability, operation class, scope kind, scope values, effect, limits. "{base}" is the demo
# services' URL at load time: web.read reaches the demo pages and nothing else — not the
# calendar, payments or _control paths, not ToolOps itself. The demo runs on loopback, so the
# scope must name the address (127.0.0.1:PORT) for the egress deny-list to let it through.
DEMO_GRANTS = [
    ("weather.read", "read", "any", [], "allow", {"calls_per_minute": 60}),
    ("calendar.write", "create", "exact", ["primary", "work"], "allow", {}),
    # Amount limits name their currency (a call in another one is not covered): one grant per currency.
    ("payments.transfer", "create", "any", [], "confirm", {"currency": "EUR", "max_amount_per_call": 50_000}),
    ("payments.transfer", "create", "any", [], "confirm", {"currency": "USD", "max_amount_per_call": 50_000}),
    ("web.read", "read", "url_prefix", ["{base}/web/pages/"], "allow", {}),
]


DEMO_GRANT_REASON = "demo data (load_demo)"


def demo_scope_values(values: list[str]) -> list[str]:
    base = settings.TOOLOPS_DEMO_SERVICES_URL.rstrip("/")
    return [v.replace("{base}", base) for v in values]


def _retire_outdated_demo_grant(tenant, subject, capability, scope_kind: str, scope_values: list[str]) -> None:
    """A demo grant an older ``load_demo`` wrote with a wider scope (``web.read`` on the domain
    suffixes 127.0.0.1 / localhost reached every demo service and ToolOps itself) is revoked,
    with a GrantChange, so the tightened one replaces it. Grants people made are left alone."""
    outdated = Grant.objects.filter(
        tenant=tenant, subject=subject, capability=capability, revoked_at__isnull=True, reason=DEMO_GRANT_REASON,
    ).exclude(scope_kind=scope_kind, scope_values=scope_values)
    for grant in outdated:
        why = "demo grant tightened: URL scopes pin scheme, host and port (issue 11)"
        if Grant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(revoked_at=timezone.now(), revoke_reason=why):
            GrantChange.objects.create(grant=grant, action="revoked", actor=None, reason=why,
                                       data={"scope_kind": grant.scope_kind, "scope_values": grant.scope_values})


@transaction.atomic
def load_demo(*, token: str | None = None, admin_password: str | None = None, admin_username: str = "admin") -> dict:
    """Create (or keep) the demo tenant, agent subject, token, admin user and ToolSpecs.

    Idempotent: running it again changes nothing that exists; a given ``token`` is installed
    if missing. Returns what a person needs to log in and call the API.
    """
    tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo tenant"})
    subject, _ = Subject.objects.get_or_create(tenant=tenant, name="demo-agent")
    for spec_data in DEMO_TOOLSPECS:
        spec, created = ToolSpec.objects.get_or_create(name=spec_data["name"], version=1, defaults=spec_data)
        if spec.status == ToolSpec.Status.DRAFT:
            toolspec_publish(spec=spec)
    for name, op, scope_kind, scope_values, effect, limits in DEMO_GRANTS:
        capability, _ = Capability.objects.get_or_create(name=name, defaults={"operation_class": op})
        _retire_outdated_demo_grant(tenant, subject, capability, scope_kind, demo_scope_values(scope_values))
        live = Grant.objects.filter(tenant=tenant, subject=subject, capability=capability, revoked_at__isnull=True)
        if not live.filter(limits=limits).exists() and not (limits.get("currency") is None and live.exists()):
            Grant.objects.create(
                capability=capability, tenant=tenant, subject=subject, scope_kind=scope_kind,
                scope_values=demo_scope_values(scope_values),
                effect=effect, limits=limits, reason=DEMO_GRANT_REASON,
            )
    issued = None
    if token:
        if not ApiToken.objects.filter(token_hash=token_hash(token)).exists():
            api_token_issue(subject=subject, label="demo", secret=token)
        issued = token
    elif not subject.tokens.filter(revoked_at__isnull=True).exists():
        _, issued = api_token_issue(subject=subject, label="demo")
    User = get_user_model()
    admin_user = User.objects.filter(username=admin_username).first()
    if admin_user is None:
        admin_user = User.objects.create_superuser(admin_username, "admin@example.invalid", admin_password or "admin")
    elif admin_password:
        admin_user.set_password(admin_password)
        admin_user.save(update_fields=["password"])
    return {"tenant": tenant.slug, "subject": str(subject), "token": issued, "admin": admin_username}
