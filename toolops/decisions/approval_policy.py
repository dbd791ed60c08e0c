"""Approval policies (issue 14 item 3): who must approve a call, decided from its normalized amount.

A policy sits on a grant (``Grant.approval_policy``) or, for grants without one, on the ToolSpec
(``confirmation_policy["approval"]``). It is small JSON with a fixed schema, checked by
``ApprovalPolicy.from_dict`` (unknown keys, wrong types and unordered tiers are errors — a typo
must never silently drop a rule)::

    {"currency": "EUR",
     "thresholds": [{"up_to": 1000, "effect": "allow"},
                     {"up_to": 50000, "effect": "confirm", "approvals": 1},
                     {"effect": "confirm", "approvals": 2}],
     "escalate_after_seconds": 600, "escalation_group": "payments-leads"}

Rules:

* ``thresholds`` are tiers over the requirement's amount in **minor units of the policy's
  ``currency``** (required with thresholds; the amount is the ToolSpec's ``amount_pointer`` into
  the normalized arguments, as for grant limits). A call in another currency, or of unknown
  currency, is denied (``policy_currency_mismatch`` / ``policy_currency_unknown``): amounts of
  two currencies are never compared. A policy stored before policies had a currency is read
  with the shell's legacy currency (``from_dict(legacy_currency=...)``). The first tier whose
  ``up_to`` is >= the amount applies — ``up_to`` is inclusive, so 1000 (10.00 EUR) is still
  ``allow`` and 1001 is ``confirm``. A last tier without ``up_to`` takes everything above; with
  none, an amount above the highest ``up_to`` is denied (``policy_denied``). A ``deny`` tier denies.
* A tier's effect replaces the grant's own effect for that call; ``approvals`` (default 1) is the
  quorum: that many *distinct* people must approve before the call runs.
* A call with no amount under a policy with thresholds is denied (fail closed).
* ``escalate_after_seconds`` + ``escalation_group`` (a Django group name): a confirmation nobody
  decided within that time is escalated to that group; expiry still denies afterwards.
* Across the grants a decision uses, the largest quorum and the earliest escalation win.
* ``edits`` (maker–checker on "approve with edits"; ``edit_requirement`` below): an edit is new
  arguments chosen by a person, so it is released by at least as many distinct people as the
  original call or the edited one needs, whichever is more — the editor's own approval counted
  as one — and by at least one person who is not the editor, unless the policy allows the editor
  alone to *narrow* a call: ``second_person_unless_narrowing`` (the default, also with no policy
  at all) lets an edit that only brings numbers closer to zero (a smaller amount, fewer minutes)
  pass on the editor's approval when the quorum is one; ``second_person_always`` asks for a
  second person for every edit. Across the policies a decision uses, the strictest wins.

Pure: no Django. The shell stores ``to_dict()`` with the grant snapshot and the decision.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from toolops.runtime.normalizers import MINOR_UNITS

TIER_EFFECTS = ("allow", "confirm", "deny")
MAX_APPROVALS = 10
POLICY_KEYS = ("currency", "thresholds", "approvals", "escalate_after_seconds", "escalation_group", "edits")
EDITS_UNLESS_NARROWING = "second_person_unless_narrowing"
EDITS_ALWAYS = "second_person_always"
EDIT_RULES = (EDITS_UNLESS_NARROWING, EDITS_ALWAYS)  # strictest last
TIER_KEYS = ("up_to", "effect", "approvals")

# Reason codes (stored in events and authorization records).
POLICY_TIER = "policy_tier"
POLICY_DENIED = "policy_denied"
POLICY_AMOUNT_UNKNOWN = "policy_amount_unknown"
POLICY_CURRENCY_MISMATCH = "policy_currency_mismatch"
POLICY_CURRENCY_UNKNOWN = "policy_currency_unknown"


class PolicyError(ValueError):
    """A policy that does not fit the schema; the message names the offending key."""


def _int(value: Any, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{name} must be an integer")
    if value < minimum:
        raise PolicyError(f"{name} must be at least {minimum}")
    return value


def _approvals(value: Any, name: str) -> int:
    count = _int(value, name, minimum=1)
    if count > MAX_APPROVALS:
        raise PolicyError(f"{name} must be at most {MAX_APPROVALS}")
    return count


@dataclass(frozen=True)
class Tier:
    """One threshold tier: amounts up to ``up_to`` (inclusive; ``None`` = no upper bound)."""

    up_to: int | None
    effect: str
    approvals: int = 1

    def covers(self, amount: int) -> bool:
        return self.up_to is None or amount <= self.up_to

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"effect": self.effect}
        if self.up_to is not None:
            out["up_to"] = self.up_to
        if self.effect == "confirm":
            out["approvals"] = self.approvals
        return out


@dataclass(frozen=True)
class ApprovalPolicy:
    thresholds: tuple[Tier, ...] = ()
    approvals: int = 1  # quorum when the grant's own effect is ``confirm`` and no tier says otherwise
    escalate_after_seconds: int | None = None
    escalation_group: str | None = None
    currency: str | None = None  # of the thresholds; None only for a policy stored before it had one
    edits: str = EDITS_UNLESS_NARROWING  # who must release an approver's edit (``edit_requirement``)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, *, legacy_currency: str | None = None) -> "ApprovalPolicy | None":
        """Parse stored JSON; ``None`` / ``{}`` means "no policy". Raises ``PolicyError``.

        ``legacy_currency``: the thresholds' currency when the stored policy names none."""
        if data is None or data == {}:
            return None
        if not isinstance(data, Mapping):
            raise PolicyError("an approval policy is a JSON object")
        unknown = sorted(set(data) - set(POLICY_KEYS))
        if unknown:
            raise PolicyError(f"unknown policy keys: {', '.join(unknown)} (known: {', '.join(POLICY_KEYS)})")
        tiers = tuple(_tier(t, i) for i, t in enumerate(data.get("thresholds") or []))
        if "thresholds" in data and not isinstance(data["thresholds"], list):
            raise PolicyError("thresholds must be a list of tiers")
        _check_order(tiers)
        escalate = data.get("escalate_after_seconds")
        group = data.get("escalation_group")
        if escalate is not None:
            escalate = _int(escalate, "escalate_after_seconds", minimum=1)
        if group is not None and (not isinstance(group, str) or not group.strip()):
            raise PolicyError("escalation_group must be a non-empty group name")
        if (escalate is None) != (group is None):
            raise PolicyError("escalate_after_seconds and escalation_group go together")
        currency = data.get("currency")
        if currency is not None and currency not in MINOR_UNITS:
            raise PolicyError(f"currency must be an ISO 4217 code ToolOps knows ({', '.join(sorted(MINOR_UNITS))})")
        if currency is not None and not tiers:
            raise PolicyError("currency goes with thresholds (it is the currency of their up_to amounts)")
        edits = data.get("edits", EDITS_UNLESS_NARROWING)
        if edits not in EDIT_RULES:
            raise PolicyError(f"edits must be one of {', '.join(EDIT_RULES)}")
        return cls(
            edits=edits,
            thresholds=tiers, approvals=_approvals(data.get("approvals", 1), "approvals"),
            escalate_after_seconds=escalate, escalation_group=group.strip() if group else None,
            currency=currency if currency is not None else (legacy_currency if tiers else None),
        )

    def to_dict(self) -> dict:
        out: dict[str, Any] = {}
        if self.currency is not None:
            out["currency"] = self.currency
        if self.thresholds:
            out["thresholds"] = [t.to_dict() for t in self.thresholds]
        if self.approvals != 1:
            out["approvals"] = self.approvals
        if self.escalate_after_seconds is not None:
            out["escalate_after_seconds"] = self.escalate_after_seconds
            out["escalation_group"] = self.escalation_group
        if self.edits != EDITS_UNLESS_NARROWING:
            out["edits"] = self.edits
        return out


def _tier(data: Any, index: int) -> Tier:
    name = f"thresholds[{index}]"
    if not isinstance(data, Mapping):
        raise PolicyError(f"{name} must be an object like {{\"up_to\": 1000, \"effect\": \"allow\"}}")
    unknown = sorted(set(data) - set(TIER_KEYS))
    if unknown:
        raise PolicyError(f"{name}: unknown keys {', '.join(unknown)} (known: {', '.join(TIER_KEYS)})")
    effect = data.get("effect")
    if effect not in TIER_EFFECTS:
        raise PolicyError(f"{name}.effect must be one of {', '.join(TIER_EFFECTS)}")
    if "approvals" in data and effect != "confirm":
        raise PolicyError(f"{name}.approvals only applies to effect confirm")
    up_to = data.get("up_to")
    return Tier(
        up_to=None if up_to is None else _int(up_to, f"{name}.up_to", minimum=0), effect=effect,
        approvals=_approvals(data.get("approvals", 1), f"{name}.approvals"),
    )


def _check_order(tiers: tuple[Tier, ...]) -> None:
    bounds = [t.up_to for t in tiers]
    if None in bounds[:-1]:
        raise PolicyError("only the last tier may omit up_to (it takes every amount above the others)")
    finite = [b for b in bounds if b is not None]
    if any(a >= b for a, b in zip(finite, finite[1:])):
        raise PolicyError("tiers must have strictly increasing up_to values")


@dataclass(frozen=True)
class PolicyOutcome:
    """What a policy makes of one grant's effect for one call."""

    effect: str  # allow | confirm | deny
    approvals: int  # quorum when ``effect == "confirm"``, else 0
    code: str | None  # a reason code when the policy decided (tier, denial), None when it had no say
    message: str


def apply_policy(policy: ApprovalPolicy | None, *, grant_effect: str, amount: int | None,
                 currency: str | None = None) -> PolicyOutcome:
    """The effect of a matched grant once its policy has seen the call's amount (minor units of
    ``currency``)."""
    if policy is None:
        return PolicyOutcome(grant_effect, 1 if grant_effect == "confirm" else 0, None, "")
    if not policy.thresholds:
        approvals = policy.approvals if grant_effect == "confirm" else 0
        return PolicyOutcome(grant_effect, approvals, None, "")
    if amount is None:
        return PolicyOutcome("deny", 0, POLICY_AMOUNT_UNKNOWN, "the approval policy has amount thresholds but the call states no amount")
    if policy.currency is not None and currency is None:
        return PolicyOutcome("deny", 0, POLICY_CURRENCY_UNKNOWN,
                             f"the approval policy's thresholds are in {policy.currency} but the call's currency is not known")
    if policy.currency is not None and currency != policy.currency:
        return PolicyOutcome("deny", 0, POLICY_CURRENCY_MISMATCH,
                             f"the call is in {currency}; the approval policy's thresholds are in {policy.currency}")
    for tier in policy.thresholds:
        if tier.covers(amount):
            bound = "no upper bound" if tier.up_to is None else f"up to {tier.up_to}"
            if tier.effect == "deny":
                return PolicyOutcome("deny", 0, POLICY_DENIED, f"amount {amount} falls in a deny tier ({bound})")
            approvals = tier.approvals if tier.effect == "confirm" else 0
            who = f", {approvals} approver(s)" if approvals else ""
            return PolicyOutcome(tier.effect, approvals, POLICY_TIER, f"amount {amount} is in the {tier.effect} tier ({bound}{who})")
    top = policy.thresholds[-1].up_to
    return PolicyOutcome("deny", 0, POLICY_DENIED, f"amount {amount} is above the highest threshold ({top})")


@dataclass(frozen=True)
class Escalation:
    after_seconds: int
    group: str

    def to_dict(self) -> dict:
        return {"after_seconds": self.after_seconds, "group": self.group}


def earliest_escalation(policies) -> Escalation | None:
    """The earliest escalation among ``policies`` (``None`` entries ignored); ties: group name order."""
    found = [Escalation(p.escalate_after_seconds, p.escalation_group) for p in policies
             if p is not None and p.escalate_after_seconds is not None]
    return min(found, key=lambda e: (e.after_seconds, e.group), default=None)


# --- approve with edits: maker–checker -----------------------------------------------------------

@dataclass(frozen=True)
class EditRequirement:
    """Who must release an approver's edit.

    ``approvals_needed`` distinct people, the editor's own approval counted as one;
    ``second_person``: at least one of them is not the editor (so ``approvals_needed >= 2``);
    ``changes``: JSON pointers of what the edit changes beyond narrowing a number (empty when
    it only narrows); ``rule``: the policies' ``edits`` rule that applied."""

    approvals_needed: int
    second_person: bool
    changes: tuple[str, ...]
    rule: str


def strictest_edit_rule(rules) -> str:
    """The strictest of ``rules`` (``edits`` values; ``None`` and unknown ones ignored; none: the default)."""
    return max((r for r in rules if r in EDIT_RULES), key=EDIT_RULES.index, default=EDITS_UNLESS_NARROWING)


def edit_requirement(*, rule: str, original_approvals: int, edited_approvals: int, before: Any, after: Any,
                     resource_pointers=()) -> EditRequirement:
    """What an edit of ``before`` (the arguments a person was asked to approve, quorum
    ``original_approvals``) into ``after`` (which the policies alone would give
    ``edited_approvals``, 0 for allow) needs: the larger quorum, and a second person unless the
    rule lets the editor narrow alone and the edit only narrows (``edit_changes``)."""
    changes = edit_changes(before, after, resource_pointers=resource_pointers)
    second = rule == EDITS_ALWAYS or bool(changes)
    needed = max(original_approvals, edited_approvals, 2 if second else 1)
    return EditRequirement(approvals_needed=needed, second_person=second, changes=changes, rule=rule)


def edit_changes(before: Any, after: Any, *, resource_pointers=()) -> tuple[str, ...]:
    """JSON pointers where ``after`` differs from ``before`` other than by narrowing a number.

    Narrowing a number: both are numbers (not booleans) and the new one is no further from zero,
    nor across it (90 → 50, -3 → -1, 7 → 0). Everything else is a change another person must
    see: another string (a recipient, a free-text field), a member or item added or removed,
    another type, a number moved away from zero — and any change at or under one of the
    ToolSpec's declared resource pointers, even a smaller number (account 1200 is not a narrower
    account 1201)."""
    changed, narrowed = [], []
    _compare(before, after, "", changed, narrowed)
    resources = [p for p in resource_pointers if p]
    changed += [p for p in narrowed if any(p == r or p.startswith(r + "/") for r in resources)]
    return tuple(sorted(set(changed)))


def _compare(before: Any, after: Any, pointer: str, changed: list, narrowed: list) -> None:
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        for key in set(before) | set(after):
            child = pointer + "/" + str(key).replace("~", "~0").replace("/", "~1")
            if key in before and key in after:
                _compare(before[key], after[key], child, changed, narrowed)
            else:
                changed.append(child)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (old, new) in enumerate(zip(before, after)):
            _compare(old, new, f"{pointer}/{index}", changed, narrowed)
    elif _is_number(before) and _is_number(after):
        if before == after:
            return
        toward_zero = 0 <= after <= before if before > 0 else before <= after <= 0
        (narrowed if toward_zero and before != 0 else changed).append(pointer)
    elif type(before) is not type(after) or before != after:
        changed.append(pointer)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --- run-scoped standing approvals ----------------------------------------------------------------

STANDING_EXPIRED = "standing_expired"
STANDING_REVOKED = "standing_revoked"
STANDING_OVER_AMOUNT = "standing_over_amount"
STANDING_AMOUNT_UNKNOWN = "standing_amount_unknown"
STANDING_CURRENCY_MISMATCH = "standing_currency_mismatch"
STANDING_CALLS_USED = "standing_calls_used"
STANDING_QUORUM = "standing_quorum"


@dataclass(frozen=True)
class StandingLimits:
    """What one standing approval covers: calls in ``currency`` (the granting call's; ``None``
    when it stated none) or, without a cap, in one of ``other_currencies`` the approver named;
    amounts up to ``max_amount`` (minor units of ``currency``, inclusive: a cap is in one
    currency, amounts in another are never compared with it); at most ``max_calls`` calls;
    until ``expires_at`` (the caller compares datetimes)."""

    max_amount: int | None
    max_calls: int | None
    currency: str | None = None
    other_currencies: tuple[str, ...] = ()


def standing_failure(limits: StandingLimits, *, amount: int | None, calls_covered: int, approvals_needed: int,
                     expired: bool, revoked: bool, currency: str | None = None) -> tuple[str, str] | None:
    """Why a standing approval does not cover a call, as ``(code, message)``; ``None`` when it does.

    A standing approval is one person's decision, so it never stands in for a quorum of two or
    more. It covers the currency the person saw, capped or not: 500 EUR approved is not 500 USD
    approved, unless they named USD too.
    """
    if revoked:
        return STANDING_REVOKED, "the standing approval was revoked"
    if expired:
        return STANDING_EXPIRED, "the standing approval has expired"
    if approvals_needed > 1:
        return STANDING_QUORUM, f"the call needs {approvals_needed} approvers; a standing approval is one person's"
    if limits.max_calls is not None and calls_covered >= limits.max_calls:
        return STANDING_CALLS_USED, f"the standing approval already covered its {limits.max_calls} call(s)"
    covered = (limits.currency or None, *(() if limits.max_amount is not None else limits.other_currencies))
    if (currency or None) not in covered:
        named = ", ".join(c or "no stated currency" for c in covered)
        return STANDING_CURRENCY_MISMATCH, (f"the call is in {currency or 'no stated currency'}; the standing "
                                            f"approval covers {named}")
    if limits.max_amount is not None:
        if amount is None:
            return STANDING_AMOUNT_UNKNOWN, "the standing approval caps amounts but the call states none"
        if amount > limits.max_amount:
            return STANDING_OVER_AMOUNT, f"amount {amount} exceeds the standing approval's {limits.max_amount}"
    return None
