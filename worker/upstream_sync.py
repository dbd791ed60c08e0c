"""Govern an existing MCP server: import its tools as draft ToolSpecs, watch them for change.

* ``upstream_import`` reads ``tools/list`` and creates one DRAFT ToolSpec per tool (name under
  a prefix, schemas, description, a *pessimistic* proposed side-effect class), its capability,
  and an ``UpstreamTool`` row holding the pin. The pin itself — SHA-256 of the RFC 8785 form of
  the definition — is also written into the spec's executor config, so a published version
  carries it immutably.
* ``upstream_refresh`` (beat) lists each server once and moves every watched tool by
  ``watch_next``: a changed or vanished definition quarantines it. Only a new version, made by
  ``upstream_new_version`` from the observed definition and published by an admin, serves the
  tool again.
* ``upstream_confirm_class``: an admin's word that the spec's side-effect class is right. Until
  then every call of the tool waits for a human (a read-only claim is only a claim).

Network I/O never runs inside a transaction here: the listing is fetched first, then written.
What an upstream lists is hostile input: a definition holding a configured tool credential (in
any encoding), a NUL, or no RFC 8785 form is never imported; when refreshed, it quarantines
the tool and is kept scrubbed; two tools that would get one name are both skipped; one bad
definition never stops the others, and no error text kept or shown holds a credential.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction
from django.db.models import Max
from django.utils import timezone

from worker import egress_net
from worker.executors import mcp_client
from toolops.sql import field_max_length
from toolops.celery import BROKER_ERRORS, app as celery_app
from toolops.decisions.egress import EgressRefused
from toolops.model_io.mcp_definitions import (
    QUARANTINED, Unpinnable, Watch, definition_sha256, governed_definition, observed_sha256, proposed_class, toolops_name,
    watch_next,
)
from toolops.model_io.rendering import ToolNameError, validate_tool_name
from toolops.model_io.tool_messages import ResultPolicy, redact

from specs_app.models import Capability, OperationClass, Tenant, ToolSpec, UpstreamTool
from specs_app.services import toolspec_check_owner

logger = logging.getLogger(__name__)

REFRESH_TASK = "specs.upstream_refresh"  # the beat's, and "refresh now"
LIST_TIMEOUT_SECONDS = 10.0
LIST_MAX_BYTES = 4 << 20
DEFAULT_RESPONSE_CAP = 1 << 20
# The longest ":class" an imported capability name may carry (``imported_capability``).
CLASS_SUFFIX_MAX = max(len(f":{op}") for op in OperationClass.values)
DEFAULT_TIMEOUT_POLICY = {"attempt_timeout_seconds": 10, "deadline_seconds": 300}


class UpstreamUnavailable(Exception):
    """The upstream could not be listed (the message never contains a credential)."""

    def __init__(self, message: str):
        super().__init__(scrubbed_text(message))


def _scrubbing() -> ResultPolicy:
    # Every configured tool secret (an upstream may echo the credential it was sent), and NUL,
    # which PostgreSQL stores in neither text nor jsonb.
    secrets = getattr(settings, "TOOLOPS_TOOL_SECRETS", {}) or {}
    return ResultPolicy(secrets=tuple(v for v in secrets.values() if isinstance(v, str)), redact_patterns=("\x00",))


def scrubbed_text(text: str) -> str:
    """``text`` safe to keep or show: secrets (in any encoding) and NULs replaced."""
    return redact(text, policy=_scrubbing())


def scrubbed_definition(definition: dict) -> tuple[dict, bool]:
    """What can be kept of a hostile definition (every key, string and number scrubbed as
    ``scrubbed_text``), and whether anything had to be."""
    kept = redact(definition, policy=_scrubbing())
    return kept, kept != definition


def credential_headers(credential: str) -> dict[str, str]:
    """``Authorization`` for a ``secret:NAME`` reference, resolved server-side; {} for none."""
    if not credential:
        return {}
    if not credential.startswith("secret:"):
        raise ValidationError('a credential is a reference "secret:NAME", never the value itself')
    value = (getattr(settings, "TOOLOPS_TOOL_SECRETS", {}) or {}).get(credential.split(":", 1)[1])
    if not value:
        raise ValidationError(f"{credential} is not configured in TOOLOPS_TOOL_SECRETS")
    return {"Authorization": f"Bearer {value}"}


def upstream_list(*, url: str, credential: str = "") -> list[dict]:
    """The upstream's tool definitions; ``UpstreamUnavailable`` when it cannot be listed.

    Under the executor's egress policy (``worker.egress_net``): http(s) only, the host resolved
    once and its address refused when private, loopback, link-local… unless the operator's
    ``TOOLOPS_EGRESS_ALLOW`` names it, the SDK client pinned to that address and origin, no
    redirects, one deadline and a byte cap — an import or refresh of a hostile URL connects
    nowhere the MCP executor could not."""
    headers = credential_headers(credential)
    try:
        pin = egress_net.mcp_pin(url, egress_net.operator_openers(), time.monotonic() + LIST_TIMEOUT_SECONDS)
    except EgressRefused as exc:
        raise UpstreamUnavailable(f"{url}: egress refused ({exc.code}): {exc.message}") from None
    except egress_net.TransportFailure as exc:
        raise UpstreamUnavailable(f"{url}: not_reached: {exc.message}") from None
    try:
        return mcp_client.list_tools(url=url, headers=headers, timeout=LIST_TIMEOUT_SECONDS, max_bytes=LIST_MAX_BYTES,
                                     pin=pin)
    except mcp_client.UpstreamFailure as exc:
        raise UpstreamUnavailable(f"{url}: {exc.kind}: {exc}") from None


@dataclass
class ImportReport:
    created: list[ToolSpec] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # upstream names already pinned as listed
    skipped: dict[str, str] = field(default_factory=dict)  # upstream name → why


def executor_config(*, url: str, tool: dict, credential: str, lookup: str | None) -> dict:
    config = {
        "kind": "mcp", "url": url, "tool": tool["name"], "definition_sha256": definition_sha256(tool),
        "max_response_bytes": DEFAULT_RESPONSE_CAP,
    }
    if isinstance(tool.get("outputSchema"), dict):
        # Pinned with the definition: the result encoder keeps ids, enums and formats out of the
        # untrusted wrapping by it, and wraps free text so the value still validates against it.
        config["output_schema"] = tool["outputSchema"]
    if credential:
        config["credential"] = credential
    if lookup:
        config["lookup"] = {"tool": lookup, "key_argument": "idempotency_key", "found_pointer": "/found"}
    return config


def upstream_import(
    *, url: str, prefix: str, credential: str = "", lookups: dict[str, str] | None = None, user=None,
    tenant: Tenant | None = None,
) -> ImportReport:
    """Create draft ToolSpecs for every tool the upstream lists (see the module docstring).

    A tool already imported with the same pin is reported unchanged; a changed one becomes the
    next version of its name. ``lookups`` maps an upstream tool to its lookup tool (by key).
    ``tenant``: the drafts are owned by (and later listed to) that tenant only; ``None``: global.
    A name whose versions already have another owner is skipped with the reason.
    """
    try:
        validate_tool_name(prefix)
    except ToolNameError as exc:
        raise ValidationError(f"prefix: {exc}") from exc
    tools = upstream_list(url=url, credential=credential)
    report = ImportReport()
    named = sorted(((str(t.get("name", "")), t) for t in tools), key=lambda pair: pair[0])
    claimants: dict[str, list[str]] = {}  # ToolSpec name → the upstream names that would get it
    for upstream_name, _ in named:
        claimants.setdefault(toolops_name(prefix, upstream_name), []).append(upstream_name)
    for upstream_name, tool in named:
        shown = scrubbed_text(upstream_name)
        name = toolops_name(prefix, upstream_name)
        if len(claimants[name]) > 1:  # a repeated name, or two names one prefix maps alike: which is which?
            report.skipped[shown] = (f"{len(claimants[name])} listed tools ({scrubbed_text(', '.join(claimants[name]))}) "
                                     f"would all be {scrubbed_text(name)}: none is imported")
            continue
        try:
            spec = _import_one(url=url, prefix=prefix, tool=tool, credential=credential,
                               lookup=(lookups or {}).get(tool.get("name", "")), user=user, tenant=tenant)
        except (ValidationError, ToolNameError, Unpinnable, DatabaseError) as exc:
            why = "; ".join(getattr(exc, "messages", None) or [str(exc)])
            report.skipped[shown] = scrubbed_text(why if not isinstance(exc, DatabaseError) else f"could not be stored: {why}")
            continue
        if spec is None:
            report.unchanged.append(tool["name"])
        else:
            report.created.append(spec)
    return report


def _import_one(*, url, prefix, tool, credential, lookup, user, tenant) -> ToolSpec | None:
    name = toolops_name(prefix, tool["name"])
    validate_tool_name(name)
    # The name also names its capability, with room for a ":class" suffix (``imported_capability``).
    longest_name = min(field_max_length(ToolSpec, "name"), field_max_length(Capability, "name") - CLASS_SUFFIX_MAX)
    for value, limit in ((name, longest_name),
                         (tool["name"], field_max_length(UpstreamTool, "upstream_name"))):
        if len(value) > limit:
            raise ValidationError(f"the name {value[:40]}… is longer than {limit} characters")
    if scrubbed_definition(governed_definition(tool))[1]:
        raise ValidationError("the definition holds a configured tool credential or a NUL character: not imported")
    sha = definition_sha256(tool)
    if UpstreamTool.objects.filter(tool_spec__name=name, pinned_sha256=sha, server_url=url).exists():
        return None
    elsewhere = UpstreamTool.objects.filter(tool_spec__name=name).exclude(server_url=url, upstream_name=tool["name"]).first()
    if elsewhere is not None:
        raise ValidationError(f"{name} is already imported from {elsewhere.upstream_name} on {elsewhere.server_url}")
    proposal = proposed_class(tool.get("annotations"))
    with transaction.atomic():
        capability = imported_capability(name=name, operation_class=proposal.operation_class,
                                         description=f"call {tool['name']} on {url} (imported)")
        top = ToolSpec.objects.select_for_update().filter(name=name).aggregate(v=Max("version"))["v"] or 0
        spec = ToolSpec(
            name=name, version=top + 1, status=ToolSpec.Status.DRAFT, tenant=tenant,
            title=(tool.get("title") or (tool.get("annotations") or {}).get("title") or "")[:200],
            description=tool.get("description") or "", input_schema=tool.get("inputSchema") or {"type": "object"},
            side_effect_class=proposal.side_effect_class,
            required_capabilities=[{"capability": capability.name}],
            confirmation_policy={"required": True} if proposal.confirmation_required else {},
            timeout_policy=dict(DEFAULT_TIMEOUT_POLICY), result_policy={"max_bytes": 8192},
            executor=executor_config(url=url, tool=tool, credential=credential, lookup=lookup), created_by=user,
        )
        toolspec_check_owner(spec=spec)
        spec.save()
        UpstreamTool.objects.create(
            tool_spec=spec, server_url=url, upstream_name=tool["name"], credential=credential,
            pinned_definition=governed_definition(tool), pinned_sha256=sha,
            proposed_class=proposal.side_effect_class, proposal_reasons=list(proposal.reasons),
            checked_at=timezone.now(),
        )
    return spec


def imported_capability(*, name: str, operation_class: str, description: str) -> Capability:
    """The capability a version of the imported tool ``name`` requires.

    Named as the tool while the proposed operation class is the one its first import gave it; a
    version proposed with another class (the upstream's annotations changed) requires
    ``name:class`` instead, so no grant given for the old class covers what the tool now does
    (":" never occurs in a tool name, so no other tool's capability can take that name).
    """
    first = Capability.objects.filter(name=name).first()
    wanted = name if first is None or first.operation_class == operation_class else f"{name}:{operation_class}"
    if len(wanted) > field_max_length(Capability, "name"):  # imported before names were checked for it
        raise ValidationError(f"the capability name {wanted[:40]}… is too long: re-import under a shorter prefix")
    capability, _ = Capability.objects.get_or_create(
        name=wanted, defaults={"operation_class": operation_class, "description": description})
    if capability.operation_class != operation_class:  # made by hand under that name
        raise ValidationError(f"the capability {wanted} exists with the class {capability.operation_class}, "
                              f"not {operation_class}")
    return capability


def upstream_confirm_class(*, upstream: UpstreamTool, user) -> UpstreamTool:
    """Record that ``user`` confirmed the spec's side-effect class as it stands now."""
    UpstreamTool.objects.filter(pk=upstream.pk).update(
        class_confirmed=upstream.tool_spec.side_effect_class, class_confirmed_by=user, class_confirmed_at=timezone.now()
    )
    upstream.refresh_from_db()
    return upstream


def upstream_refresh(*, server_urls: list[str] | None = None, now=None) -> dict[str, int]:
    """Re-list each watched server once and move every watched tool (drafts and published).

    An unreachable server leaves its tools' state alone (recorded in ``check_error``): a network
    blip is not a rug pull, and calls to it fail on their own. Returns counts per new state.
    """
    now = now or timezone.now()
    watched = UpstreamTool.objects.exclude(tool_spec__status=ToolSpec.Status.RETIRED).select_related("tool_spec")
    if server_urls is not None:  # an admin's "refresh now"; None: every server (the beat)
        watched = watched.filter(server_url__in=server_urls)
    by_server: dict[tuple[str, str], list[UpstreamTool]] = {}
    for row in watched:
        by_server.setdefault((row.server_url, row.credential), []).append(row)
    counts = {s: 0 for s in (Watch.PINNED, Watch.CHANGED, Watch.MISSING)} | {"unreachable": 0}
    for (url, credential), rows in by_server.items():
        try:
            listed: dict[str, dict] = {}
            for tool in upstream_list(url=url, credential=credential):
                listed.setdefault(tool.get("name"), tool)  # the first, as the call-time pin check reads it
        except (UpstreamUnavailable, ValidationError) as exc:
            UpstreamTool.objects.filter(pk__in=[r.pk for r in rows]).update(
                check_error=scrubbed_text("; ".join(getattr(exc, "messages", None) or [str(exc)]))[:300], checked_at=now)
            counts["unreachable"] += len(rows)
            continue
        for row in rows:
            try:
                counts[upstream_observe(upstream=row, observed=listed.get(row.upstream_name), now=now)] += 1
            except Exception as exc:  # noqa: BLE001 - one hostile definition must not stop the other tools' watch
                logger.exception("upstream tool %s: the refreshed definition could not be recorded", row.tool_spec.ref)
                UpstreamTool.objects.filter(pk=row.pk).update(
                    check_error=scrubbed_text(f"the refreshed definition could not be recorded: {type(exc).__name__}")[:300],
                    checked_at=now)
                counts["unreachable"] += 1
    return counts


def upstream_refresh_enqueue(*, server_urls: list[str]) -> None:
    """Ask a worker to refresh these servers now (the admin's "refresh now"). Listing a server can
    take up to ``LIST_TIMEOUT_SECONDS``, too long to hold a web request for; the result shows on
    the rows (checked at, state, check error) once a worker has run it. ``UpstreamUnavailable``
    when the broker cannot take the message (the beat's refresh still comes)."""
    try:
        celery_app.signature(REFRESH_TASK, kwargs={"server_urls": sorted(set(server_urls))}).apply_async()
    except BROKER_ERRORS as exc:
        raise UpstreamUnavailable(f"the task queue is unreachable ({type(exc).__name__}): nothing was queued") from None


def upstream_observe(*, upstream: UpstreamTool, observed: dict | None, now=None) -> str:
    """Record one observation of the live definition; returns the watch state after it.

    A compare-and-set on the state read: a concurrent refresh that moved it first wins, and
    this observation is dropped (the next refresh sees the same upstream).
    """
    now = now or timezone.now()
    target = watch_next(state=upstream.state, pinned_sha256=upstream.pinned_sha256, observed=observed)
    fields = {"checked_at": now, "check_error": ""}
    live_sha = observed_sha256(observed) if observed else ""
    if upstream.state == Watch.CHANGED and (observed is None or live_sha == upstream.pinned_sha256):
        # Still quarantined as changed (vanishing or changing back lifts nothing); the changed
        # definition stays as the evidence.
        fields["check_error"] = ("the upstream no longer lists this tool" if observed is None
                                 else "the upstream lists the pinned definition again; the change stays quarantined")
    elif target in QUARANTINED:
        kept, scrubbed = scrubbed_definition(governed_definition(observed)) if observed else (None, False)
        # "" when no new version can be pinned from what is kept (scrubbed, or no RFC 8785 form).
        observed_sha = "" if scrubbed else live_sha
        if target != upstream.state or observed_sha != upstream.observed_sha256:
            fields.update(state=target, observed_definition=kept, observed_sha256=observed_sha, detected_at=now)
            logger.warning("upstream tool %s quarantined (%s)", upstream.tool_spec.ref, target)
    elif target != upstream.state:
        fields.update(state=target, observed_definition=None, observed_sha256="", detected_at=None)
    UpstreamTool.objects.filter(pk=upstream.pk, state=upstream.state).update(**fields)
    return target


def upstream_drift_seen(*, name: str, version: int, observed: dict | None) -> str | None:
    """A worker found the live definition off its pin right before a call: quarantine now
    rather than at the next refresh. Returns the watch state after it (None: not imported)."""
    row = UpstreamTool.objects.filter(tool_spec__name=name, tool_spec__version=version).select_related("tool_spec").first()
    return upstream_observe(upstream=row, observed=observed) if row else None


def upstream_new_version(*, upstream: UpstreamTool, user=None) -> ToolSpec:
    """A DRAFT next version of the spec made from the observed (changed) definition, with its own
    pin; the class is proposed afresh from the new annotations and needs confirming again."""
    if upstream.state != Watch.CHANGED or not upstream.observed_definition:
        raise ValidationError("only a changed definition can become a new version")
    old = upstream.tool_spec
    tool = upstream.observed_definition
    if not upstream.observed_sha256:
        raise ValidationError("the changed definition cannot be pinned (no RFC 8785 form, or it was scrubbed): "
                              "fix the upstream, then refresh")
    proposal = proposed_class(tool.get("annotations"))
    config = {**(old.executor or {}), "definition_sha256": definition_sha256(tool)}
    ours = {old.name} | {f"{old.name}:{op}" for op in OperationClass.values}  # what an import names for it
    config.pop("output_schema", None)
    if isinstance(tool.get("outputSchema"), dict):
        config["output_schema"] = tool["outputSchema"]
    with transaction.atomic():
        capability = imported_capability(name=old.name, operation_class=proposal.operation_class,
                                         description=f"call {upstream.upstream_name} on {upstream.server_url} (imported)")
        # The imported capability follows the new class; one an admin added by hand stays.
        required = []
        for entry in old.required_capabilities or []:
            entry = {**entry, "capability": capability.name} if entry.get("capability") in ours else entry
            if entry not in required:  # NAME and NAME:CLASS both listed by hand become one
                required.append(entry)
        top = ToolSpec.objects.select_for_update().filter(name=old.name).aggregate(v=Max("version"))["v"] or 0
        spec = ToolSpec(
            name=old.name, version=top + 1, status=ToolSpec.Status.DRAFT, tenant=old.tenant,
            title=(tool.get("title") or (tool.get("annotations") or {}).get("title") or old.title)[:200],
            description=tool.get("description") or "", input_schema=tool.get("inputSchema") or {"type": "object"},
            side_effect_class=proposal.side_effect_class, required_capabilities=required,
            confirmation_policy={**(old.confirmation_policy or {}), **({"required": True} if proposal.confirmation_required else {})},
            timeout_policy=old.timeout_policy, retry_policy=old.retry_policy, result_policy=old.result_policy,
            normalizers=old.normalizers, executor=config, created_by=user,
        )
        toolspec_check_owner(spec=spec)
        spec.save()
        UpstreamTool.objects.create(
            tool_spec=spec, server_url=upstream.server_url, upstream_name=upstream.upstream_name,
            credential=upstream.credential, pinned_definition=governed_definition(tool), pinned_sha256=definition_sha256(tool),
            proposed_class=proposal.side_effect_class, proposal_reasons=list(proposal.reasons), checked_at=timezone.now(),
        )
    return spec
