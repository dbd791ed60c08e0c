"""Run-scoped standing approvals (issue 14): "approve calls of this tool in this run within these
limits for N minutes", granted by an approver from a confirmation, recorded and revocable.

Authorization asks ``standing_approval_take`` whether a live one covers a call that would need a
person (the coverage rule is pure: ``toolops.decisions.approval_policy.standing_failure``). Taking
one is a conditional ``UPDATE … SET calls_covered = calls_covered + 1 WHERE`` it is still live and
has calls left, so two concurrent calls cannot both take the last one. The call then records the
standing approval as its reason (authorization record and a ``standing_approval_applied`` event);
granting and revoking are events on the call the approver was looking at.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from specs_app.selectors import call_requirements
from toolops.errors import ApplicationError, Conflict
from toolops.decisions.approval_policy import StandingLimits, standing_failure
from toolops.runtime.normalizers import MINOR_UNITS, NormalizationRejected, amount_to_minor
from toolops.decisions.requirements import RequirementError, money_currency

from invocations_app.confirmations import confirmation_approve, refuse_if_acting_for
from invocations_app.models import Confirmation, StandingApproval
from invocations_app.transitions import event_append

MAX_STANDING_MINUTES = 24 * 60
MAX_CAP_MINOR = 2**53 - 1  # as the normalizer bounds amounts: exact in JSON, fits the column


@dataclass(frozen=True)
class StandingUse:
    """One call covered by a standing approval (given back with ``release`` if the call is not recorded)."""

    standing: StandingApproval

    def record(self) -> dict:
        s = self.standing
        return {
            "id": str(s.pk), "granted_by": s.granted_by.get_username(), "expires_at": s.expires_at.isoformat(),
            "max_amount": s.max_amount, "currency": s.currency or None, "other_currencies": s.other_currencies,
            "max_calls": s.max_calls, "reason": s.reason,
            "from_confirmation_id": str(s.from_confirmation_id) if s.from_confirmation_id else None,
        }

    def message(self) -> str:
        s = self.standing
        return (f"approved in advance by {s.granted_by.get_username()}: standing approval {str(s.pk)[:8]} "
                f"for this tool in this run until {s.expires_at:%Y-%m-%d %H:%M} UTC")

    def release(self) -> None:
        StandingApproval.objects.filter(pk=self.standing.pk, calls_covered__gt=0).update(calls_covered=F("calls_covered") - 1)


def standing_approval_take(*, run_id, tool_spec_id, amount: int | None, approvals_needed: int, now: datetime,
                           currency: str | None = None) -> StandingUse | None:
    """Count this call against the oldest live standing approval that covers it; None if none
    does. ``currency``: the call's amounts' (a cap in another currency does not cover it)."""
    live = (StandingApproval.objects.filter(run_id=run_id, tool_spec_id=tool_spec_id, revoked_at__isnull=True, expires_at__gt=now)
            .select_related("granted_by").order_by("created_at"))  # index invocations_standing_live
    for standing in live:
        failure = standing_failure(
            StandingLimits(max_amount=standing.max_amount, max_calls=standing.max_calls, currency=standing.currency or None,
                           other_currencies=tuple(standing.other_currencies)),
            amount=amount, currency=currency, calls_covered=standing.calls_covered, approvals_needed=approvals_needed,
            expired=False, revoked=False,
        )
        if failure is not None:
            continue
        room = Q(max_calls__isnull=True) | Q(calls_covered__lt=F("max_calls"))
        taken = StandingApproval.objects.filter(room, pk=standing.pk, revoked_at__isnull=True, expires_at__gt=now).update(
            calls_covered=F("calls_covered") + 1)
        if taken == 1:
            return StandingUse(standing)
    return None


def standing_approval_grant(
    *, confirmation: Confirmation, user, minutes: int, max_amount: int | None = None, max_calls: int | None,
    reason: str, max_amount_typed: str | None = None, other_currencies: str = "",
) -> StandingApproval:
    """Approve ``confirmation`` and let later calls of its tool in its run through within the limits.

    It covers calls in the currency of the call at hand, capped or not, and — only without a cap —
    in the ``other_currencies`` the person names (``named_currencies``: ``"USD GBP"``). The cap is
    ``max_amount`` (minor units) or ``max_amount_typed``, as a person typed it in the call's
    currency (``typed_cap_minor``). The approval of the call at hand goes through
    ``confirmation_approve`` (digest, quorum, separation of duties); the standing approval is
    refused to the person the run acts for.
    """
    currency = call_currency(confirmation)
    if max_amount_typed is not None:
        max_amount = typed_cap_minor(max_amount_typed, currency)
    others = named_currencies(other_currencies, currency)
    if others and max_amount is not None:
        raise ApplicationError(f"a capped standing approval covers only this call's currency ({currency or 'none stated'}): "
                               "leave the cap empty to name other currencies", code="invalid_standing_approval")
    if not reason.strip():
        raise ApplicationError("a reason is required for a standing approval", code="reason_required")
    if not 1 <= minutes <= MAX_STANDING_MINUTES:
        raise ApplicationError(f"minutes must be between 1 and {MAX_STANDING_MINUTES}", code="invalid_standing_approval")
    if (max_amount is not None and max_amount < 0) or (max_calls is not None and max_calls < 1):
        raise ApplicationError("limits must be a non-negative amount and at least one call", code="invalid_standing_approval")
    if confirmation.approvals_needed > 1:
        raise ApplicationError(f"this call needs {confirmation.approvals_needed} approvers; a standing approval is one "
                               "person's and covers only single-approver calls", code="invalid_standing_approval")
    refuse_if_acting_for(confirmation.run, user)
    now = timezone.now()
    with transaction.atomic():
        confirmation_approve(confirmation=confirmation, user=user, digest_seen=confirmation.digest, reason=reason)
        standing = StandingApproval.objects.create(
            run_id=confirmation.run_id, tool_spec_id=confirmation.tool_spec_id, tenant_id=confirmation.tenant_id,
            granted_by=user, from_confirmation=confirmation, reason=reason.strip(), max_amount=max_amount,
            currency=currency, other_currencies=others, max_calls=max_calls, created_at=now,
            expires_at=now + timedelta(minutes=minutes),
        )
        event_append(invocation=confirmation.invocation, kind="standing_approval_granted", actor=f"user:{user.username}", data={
            "standing_approval_id": str(standing.pk), "tool": confirmation.tool_spec.ref, "run_id": str(confirmation.run_id),
            "expires_at": standing.expires_at.isoformat(), "max_amount": max_amount,
            "currency": standing.currency or None, "other_currencies": others, "max_calls": max_calls,
            "reason": standing.reason,
        })
    return standing


def call_currency(confirmation: Confirmation) -> str:
    """The currency the call being approved states its amount in, read as authorization reads
    it: the cap is in that currency, the one the person saw ("" when none is stated)."""
    try:
        requirements = call_requirements(spec=confirmation.tool_spec, arguments=confirmation.invocation.normalized_arguments)
    except RequirementError:
        return ""
    return money_currency(requirements) or ""


def named_currencies(typed: str, currency: str) -> list[str]:
    """The other currencies a person named for a standing approval, as ISO 4217 codes: ``"usd,
    GBP"`` → ``["GBP", "USD"]`` (the call's own ``currency`` is covered anyway and left out).
    An unknown code is refused (``invalid_standing_approval``), never dropped."""
    named = set()
    for word in (typed or "").replace(",", " ").split():
        code = word.upper()
        if not code.isascii() or code not in MINOR_UNITS:
            raise ApplicationError(f"{word[:16]!r} is not a currency code (ISO 4217, like USD)", code="invalid_standing_approval")
        named.add(code)
    return sorted(named - {currency})


def typed_cap_minor(typed: str, currency: str) -> int | None:
    """The amount cap a person typed on the confirmation page, in minor units: ``"50"`` or
    ``"50.00"`` EUR → 5000, as the call's own amount was written; blank → None (no cap). With no
    currency stated, the tool's amount has no known unit, so the cap is a whole number in the
    same unit. Anything else is refused (``invalid_standing_approval``) — never guessed."""
    typed = (typed or "").strip()
    if not typed:
        return None
    if typed[0] in "+-":  # "-0" is a number, but a signed cap is a typo, never a limit
        raise ApplicationError(f"the amount cap {typed!r} must not carry a sign", code="invalid_standing_approval")
    if not currency:
        # Length first: int() of a few thousand digits is refused by Python itself (a 500).
        if len(typed) > 16 or not typed.isascii() or not typed.isdigit() or int(typed) > MAX_CAP_MINOR:
            raise ApplicationError(f"the amount cap {typed!r} must be a whole number up to {MAX_CAP_MINOR} "
                                   "(this call states no currency)", code="invalid_standing_approval")
        return int(typed)
    try:
        return amount_to_minor(typed, currency)
    except NormalizationRejected as exc:
        raise ApplicationError(f"the amount cap: {exc.message} (write it like 50 or 50.00 {currency})",
                               code="invalid_standing_approval") from None


def standing_approval_revoke(*, standing: StandingApproval, user, reason: str) -> StandingApproval:
    """Stop a standing approval covering further calls (calls it already covered stand).

    A reason is required (``reason_required``, nothing changes without one): it is kept on the
    standing approval, in the ``standing_approval_revoked`` event and shown on the record."""
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError("a reason is required to revoke a standing approval", code="reason_required")
    now = timezone.now()
    with transaction.atomic():
        changed = StandingApproval.objects.filter(pk=standing.pk, revoked_at__isnull=True).update(
            revoked_at=now, revoked_by=user, revoke_reason=reason)
        if changed != 1:
            raise Conflict("this standing approval is already revoked", code="already_revoked")
        if standing.from_confirmation_id:
            event_append(invocation=standing.from_confirmation.invocation, kind="standing_approval_revoked",
                         actor=f"user:{user.username}", data={
                             "standing_approval_id": str(standing.pk), "reason": reason,
                             "calls_covered": StandingApproval.objects.values_list("calls_covered", flat=True).get(pk=standing.pk),
                         })
    standing.refresh_from_db()
    return standing
