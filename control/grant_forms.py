"""The grant form people can read (issue 32): scope values one per line, limits as labelled fields in
major units of a currency picked once, tool versions from a picker, an approval-policy builder of
tiers and escalation. ``GrantForm.grant_values()`` turns it into exactly the values the JSON form
would hand ``specs_app.services.grant_create`` (limits and policy in minor units, converted with
the currency's ISO 4217 exponent by the normalizers' own ``amount_to_minor``), and
``grant_preview`` says the grant in words before it is saved (the approvers' own wording,
``toolops.decisions.approval_display``).
"""
from __future__ import annotations

from django import forms
from django.contrib.auth.models import Group

from toolops.decisions.approval_display import limits_display, policy_display, scope_display
from toolops.runtime.normalizers import MINOR_UNITS, NormalizationRejected, amount_to_minor

from specs_app.models import Capability, Grant, Subject, Tenant, ToolSpec
from specs_app.selectors import toolspec_scope_q

TIER_DECISIONS = [("allow", "runs without a person"), ("one", "one person confirms"), ("two", "two people confirm"),
                  ("deny", "denied")]
_TIER_JSON = {"allow": {"effect": "allow"}, "one": {"effect": "confirm", "approvals": 1},
              "two": {"effect": "confirm", "approvals": 2}, "deny": {"effect": "deny"}}
CURRENCIES = [("", "— no amounts —")] + [(code, f"{code} ({digits} decimals)") for code, digits in sorted(MINOR_UNITS.items())]


def published_tools(*, tenant: Tenant):
    """Published versions the tenant may be granted (global or its own)."""
    return ToolSpec.objects.filter(toolspec_scope_q(tenant_id=tenant.pk), status=ToolSpec.Status.PUBLISHED).order_by("name", "-version")


def tools_needing(capability: Capability, tools) -> list[ToolSpec]:
    return [t for t in tools if any(isinstance(e, dict) and e.get("capability") == capability.name
                                    for e in t.required_capabilities or [])]


def tool_requires_person(spec: ToolSpec) -> bool:
    """The ToolSpec's own rule: a person confirms every call, whatever a grant says."""
    return bool((spec.confirmation_policy or {}).get("required")) if isinstance(spec.confirmation_policy, dict) else False


class ToolVersions(forms.MultipleChoiceField):
    widget = forms.CheckboxSelectMultiple


def _tool_label(spec: ToolSpec) -> str:
    needs = ", ".join(e.get("capability", "") for e in spec.required_capabilities or [] if isinstance(e, dict))
    rule = " — its ToolSpec requires a person to confirm every call, whatever this grant says" if tool_requires_person(spec) else ""
    return f"{spec.ref} (needs {needs or 'no capability'}){rule}"


class TierForm(forms.Form):
    up_to = forms.CharField(required=False, label="up to (amount)", widget=forms.TextInput(attrs={"size": 12, "inputmode": "decimal"}),
                            help_text="empty: every amount above the tier before")
    decision = forms.ChoiceField(choices=[("", "—")] + TIER_DECISIONS, required=False, label="then")


TierFormSet = forms.formset_factory(TierForm, extra=3, max_num=6)


class GrantForm(forms.Form):
    capability = forms.ModelChoiceField(queryset=Capability.objects.all())
    subject = forms.ModelChoiceField(queryset=Subject.objects.none(), required=False, empty_label="every agent of the tenant",
                                     label="Agent")
    effect = forms.ChoiceField(choices=Grant.Effect.choices, widget=forms.RadioSelect, initial="allow")
    scope_kind = forms.ChoiceField(choices=Grant.ScopeKind.choices, initial="exact", label="Scope")
    scope_values = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Scope values, one per line",
                                   help_text='e.g. calendar ids "primary" and "work"; empty with scope "any"')
    calls_per_minute = forms.IntegerField(required=False, min_value=0, label="Calls per minute")
    calls_per_run = forms.IntegerField(required=False, min_value=0, label="Calls per run")
    currency = forms.ChoiceField(choices=CURRENCIES, required=False, label="Currency of the amounts below")
    max_amount_per_call = forms.CharField(required=False, label="Amount per call, at most",
                                          widget=forms.TextInput(attrs={"inputmode": "decimal"}), help_text="e.g. 100.00")
    max_amount_per_window = forms.CharField(required=False, label="Amount per window, at most",
                                            widget=forms.TextInput(attrs={"inputmode": "decimal"}))
    window_minutes = forms.IntegerField(required=False, min_value=1, label="Window, in minutes")
    tool_refs = ToolVersions(required=False, label="Tool versions",
                             help_text="none ticked: the published versions that need this capability today")
    escalate_after_minutes = forms.IntegerField(required=False, min_value=1, label="Escalate after (minutes)")
    escalation_group = forms.ModelChoiceField(queryset=Group.objects.order_by("name"), required=False, to_field_name="name",
                                              label="to the group")
    expires_at = forms.DateTimeField(required=False, label="Expires at (UTC, optional)",
                                     widget=forms.DateTimeInput(attrs={"placeholder": "2027-01-31 18:00"}))
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), label="Why this grant exists (kept in the audit log)")

    def __init__(self, *args, tenant: Tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.fields["subject"].queryset = Subject.objects.filter(tenant=tenant, is_active=True).order_by("name")
        self.tools = list(published_tools(tenant=tenant))
        self.fields["tool_refs"].choices = [(t.ref, _tool_label(t)) for t in self.tools]
        self.tiers = TierFormSet(*args, prefix="tier")

    def is_valid(self) -> bool:
        return all([super().is_valid(), self.tiers.is_valid()]) and not self.errors

    # --- parsing ---------------------------------------------------------------------------
    def _minor(self, field: str | None, text: str, currency: str, *, what: str = "") -> int | None:
        """Major units typed by a person → minor units of ``currency``, exactly (``"100.00"`` EUR →
        10000; a third decimal is refused, not rounded); ``field`` None: a tier's, a form error."""
        if not (text or "").strip():
            return None
        if not currency:
            self.add_error("currency", "amounts need their currency: pick one")
            return None
        try:
            return amount_to_minor(text.strip(), currency)
        except NormalizationRejected as exc:
            self.add_error(field, f"{what}{exc.message} (type an amount in {currency}, e.g. 100.00)")
            return None

    def clean_scope_values(self):
        return [line.strip() for line in (self.cleaned_data.get("scope_values") or "").splitlines() if line.strip()]

    def clean(self):
        data = super().clean()
        currency = data.get("currency") or ""
        limits = {"calls_per_minute": data.get("calls_per_minute"), "calls_per_run": data.get("calls_per_run"),
                  "max_amount_per_call": self._minor("max_amount_per_call", data.get("max_amount_per_call"), currency)}
        window = self._minor("max_amount_per_window", data.get("max_amount_per_window"), currency)
        if (window is None) != (data.get("window_minutes") is None) and "max_amount_per_window" not in self.errors:
            self.add_error("window_minutes", "an amount per window needs its window, and a window its amount")
        elif window is not None:
            limits.update(max_amount_per_window=window, amount_window_seconds=data["window_minutes"] * 60)
        limits = {k: v for k, v in limits.items() if v is not None}
        if any(k.startswith("max_amount") for k in limits):
            limits["currency"] = currency
        self.limits = limits
        self.policy = self._policy(data, currency)
        capability = data.get("capability")
        if capability is not None:
            self._against_capability(capability, data)
        return data

    def _policy(self, data: dict, currency: str) -> dict:
        tiers = []
        if self.tiers.is_valid():
            rows = [t.cleaned_data for t in self.tiers if t.cleaned_data.get("decision")]
            for n, row in enumerate(rows):
                up_to = self._minor(None, row.get("up_to") or "", currency, what=f"tier {n + 1}: ")
                if not (row.get("up_to") or "").strip() and n != len(rows) - 1:
                    self.add_error(None, f"tier {n + 1}: only the last tier may be without an 'up to' amount")
                tiers.append({**_TIER_JSON[row["decision"]], **({"up_to": up_to} if up_to is not None else {})})
        policy = {"currency": currency, "thresholds": tiers} if tiers else {}
        minutes, group = data.get("escalate_after_minutes"), data.get("escalation_group")
        if (minutes is None) != (group is None):
            self.add_error("escalation_group", "escalation needs both its minutes and its group")
        elif minutes is not None:
            policy.update(escalate_after_seconds=minutes * 60, escalation_group=group.name)
        return policy

    def _against_capability(self, capability: Capability, data: dict) -> None:
        """What the tools needing ``capability`` can be checked against: a scope needs a resource,
        amounts need an amount, and a picked version must need the capability."""
        needing = tools_needing(capability, self.tools)
        picked = set(data.get("tool_refs") or [])
        if stray := sorted(picked - {t.ref for t in needing}):
            self.add_error("tool_refs", f"these versions do not need {capability.name}: {', '.join(stray)}")
        entries = [e for t in needing for e in t.required_capabilities if isinstance(e, dict) and e.get("capability") == capability.name]
        if data.get("scope_kind") not in (None, "any") and needing and not any(e.get("resource_pointer") for e in entries):
            self.add_error("scope_kind", f"calls needing {capability.name} name no resource: use scope 'any'")
        has_amounts = any(k.startswith("max_amount") for k in self.limits) or self.policy.get("thresholds")
        if has_amounts and needing and not any(e.get("amount_pointer") for e in entries):
            self.add_error("currency", f"calls needing {capability.name} carry no amount: amount limits and tiers would never apply")

    def grant_values(self) -> dict:
        """The keyword arguments of ``grant_create``, as the JSON form would have given them."""
        data = self.cleaned_data
        return {"capability": data["capability"], "tenant": self.tenant, "subject": data.get("subject"),
                "scope_kind": data["scope_kind"], "scope_values": data["scope_values"], "limits": self.limits,
                "effect": data["effect"], "tool_refs": list(data.get("tool_refs") or []), "expires_at": data.get("expires_at"),
                "approval_policy": self.policy, "reason": data["reason"]}

    def tools_with_own_rule(self) -> list[ToolSpec]:
        """The versions this grant would cover whose ToolSpec requires a person for every call."""
        data = getattr(self, "cleaned_data", {})
        capability = data.get("capability")
        if capability is None:
            return []
        picked = set(data.get("tool_refs") or [])
        return [t for t in tools_needing(capability, self.tools) if (not picked or t.ref in picked) and tool_requires_person(t)]


def grant_words(*, capability_name: str, operation: str, subject_name: str | None, tenant_slug: str, scope_kind: str,
                scope_values: list, limits: dict, effect: str, policy: dict, tool_refs: list) -> list[str]:
    """A grant in plain language, one sentence per line (for the preview and the grant list)."""
    who = subject_name or f"every agent of {tenant_slug}"
    lines = [f"{who} may {operation} with {capability_name} on {scope_display(scope_kind, scope_values)}"
             + (", after a person confirms each call" if effect == "confirm" and not policy.get("thresholds") else "")]
    lines += limits_display(limits, currency=None)
    lines += policy_display(policy, currency=None)
    if policy.get("escalation_group"):
        lines.append(f"undecided after {policy['escalate_after_seconds'] // 60} min: the group "
                     f"{policy['escalation_group']} is told")
    lines.append("tool versions: " + (", ".join(tool_refs) if tool_refs else "those published today that need it"))
    return lines


def grant_preview(form: GrantForm) -> list[str]:
    values = form.grant_values()
    subject = values["subject"]
    return grant_words(capability_name=values["capability"].name, operation=values["capability"].operation_class,
                       subject_name=subject.name if subject else None, tenant_slug=form.tenant.slug,
                       scope_kind=values["scope_kind"], scope_values=values["scope_values"], limits=values["limits"],
                       effect=values["effect"], policy=values["approval_policy"], tool_refs=values["tool_refs"])
