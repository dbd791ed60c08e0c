"""Approve with edits in the console: a form generated from the tool's input schema (or raw
JSON), a preview of what the edit becomes (normalized, new digest, difference, what the grants
say, who else must approve it: maker–checker), then one approval bound to the new digest.

Thin views: the form words come from ``toolops.decisions.approval_display``, the decision from
``invocations_app.confirmation_edits``. Previewing is a POST that writes nothing; only
``approve_edited`` changes state. The same guardian permission as approve/deny is checked on every
request (``confirmation_get_for_user``).
"""
from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods, require_POST

from toolops.errors import ApplicationError
from toolops.decisions import approval_display as words
from toolops.decisions.authorization import Effect

from invocations_app.approval_display import approval_display, spec_kinds
from invocations_app.confirmation_edits import (
    confirmation_approve_with_edits, confirmation_edit_authorization, confirmation_edit_requirement, confirmation_preview_edit,
)
from invocations_app.confirmations import StaleDigest
from invocations_app.models import Confirmation
from control.formatting import edit_needs_text, pretty
from control.selectors import confirmation_get_for_user


def _form_fields(confirmation: Confirmation, values) -> list[dict]:
    return words.edit_form_fields(input_schema=confirmation.tool_spec.input_schema,
                                  kinds=spec_kinds(confirmation.tool_spec), values=values)


@require_http_methods(["GET", "POST"])
def edit_view(request: HttpRequest, pk) -> HttpResponse:
    """GET: the form, filled with what the approver saw. POST: the preview (nothing written)."""
    confirmation = confirmation_get_for_user(user=request.user, pk=pk)
    kinds = spec_kinds(confirmation.tool_spec)
    start = words.input_shape(confirmation.arguments, kinds)
    context = {"raw_json": pretty(start), "reason": "", "mode": "fields", "preview": None, "errors": []}
    fields = _form_fields(confirmation, start)
    if request.method == "POST" and confirmation.state == Confirmation.Status.PENDING:
        context.update(mode=request.POST.get("mode", "fields"), reason=request.POST.get("reason", "").strip())
        posted = {f["name"]: request.POST.get(f"arg:{f['name']}", "") for f in fields}
        fields = [{**f, "value": posted[f["name"]]} for f in fields]
        context["raw_json"] = request.POST.get("raw_json", context["raw_json"])
        context.update(_preview(confirmation, fields, posted, context))
    return TemplateResponse(request, "admin/confirmations/edit.html", {
        **admin.site.each_context(request), "title": f"Edit and approve {confirmation.tool_spec.ref}",
        "c": confirmation, "d": approval_display(confirmation), "fields": fields, **context,
    })


def _preview(confirmation: Confirmation, fields: list[dict], posted: dict, context: dict) -> dict:
    """``{"edited_text", "preview", "errors"}``: the edit run through the same chain as a proposal."""
    try:
        edited_text = context["raw_json"] if context["mode"] == "json" else \
            words.canonical_text(words.arguments_from_form(fields, posted))
    except words.FormError as exc:
        return {"errors": [str(exc)]}
    plan = confirmation_preview_edit(confirmation=confirmation, edited_arguments=edited_text)
    if plan.error:
        return {"errors": [f"{plan.final_state}: {plan.error['message']}"], "edited_text": edited_text}
    kinds = spec_kinds(confirmation.tool_spec)
    zone = (confirmation.invocation.normalization_context or {}).get("timezone")
    decision = confirmation_edit_authorization(confirmation=confirmation, plan=plan)
    denied = decision.effect == Effect.DENY
    needs = confirmation_edit_requirement(confirmation=confirmation, plan=plan, decision=decision)
    return {"edited_text": edited_text, "errors": [], "preview": {
        "needs": needs, "needs_text": edit_needs_text(needs),
        "digest": plan.digest, "unchanged": plan.digest == confirmation.digest,
        "arguments": words.arguments_display(plan.normalized_arguments, kinds, zone_name=zone),
        "changes": words.arguments_difference(confirmation.arguments, plan.normalized_arguments, kinds, zone_name=zone),
        "steps": words.interpretation_display(raw=edited_text.encode(), context=confirmation.invocation.normalization_context,
                                              trace=plan.normalization_trace, kinds=kinds)["steps"],
        "denied": denied,
        "decision": "deny" if denied else decision.effect.value,
        "reasons": decision.public_reasons() if denied else [],
    }}


@require_POST
def approve_edited_view(request: HttpRequest, pk) -> HttpResponse:
    confirmation = confirmation_get_for_user(user=request.user, pk=pk)  # 403 before anything changes
    try:
        replacement = confirmation_approve_with_edits(
            confirmation=confirmation, user=request.user, digest_seen=request.POST.get("digest_seen", ""),
            edited_arguments=request.POST.get("edited", ""), new_digest_seen=request.POST.get("new_digest_seen", ""),
            reason=request.POST.get("reason", "").strip(),
        )
    except StaleDigest as exc:
        messages.error(request, f"Not approved: {exc.message}. Review the preview again.")
        return redirect("confirmations:edit", pk=confirmation.pk)
    except ApplicationError as exc:
        messages.error(request, f"Not approved: {exc.message}")
        return redirect("confirmations:detail", pk=confirmation.pk)
    waiting = replacement.confirmations.filter(state=Confirmation.Status.PENDING).first()
    if waiting is not None:  # maker–checker: the edit waits for other approvers
        have = waiting.approvals.count()
        messages.success(request, f"Your edited call ({replacement.digest[:12]}) is recorded with your approval: {have} of "
                                  f"{waiting.approvals_needed}; it runs when {waiting.approvals_needed - have} other person(s) approve it.")
    else:
        messages.success(request, f"Approved the edited call ({replacement.digest[:12]}): invocation {replacement.pk} is {replacement.state}.")
    return redirect(reverse("support:record", args=[replacement.pk]))


urlpatterns = [
    path("<uuid:pk>/edit", admin.site.admin_view(edit_view), name="edit"),
    path("<uuid:pk>/approve-edited", admin.site.admin_view(approve_edited_view), name="approve_edited"),
]
