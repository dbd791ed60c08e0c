"""Approval policies in the pure core: the schema, thresholds at their boundaries, quorum, escalation,
and what a standing approval covers (no database)."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from toolops.decisions.approval_policy import (
    EDITS_ALWAYS, EDITS_UNLESS_NARROWING, POLICY_AMOUNT_UNKNOWN, POLICY_DENIED, STANDING_AMOUNT_UNKNOWN, STANDING_CALLS_USED,
    STANDING_CURRENCY_MISMATCH, STANDING_OVER_AMOUNT, STANDING_QUORUM, ApprovalPolicy, PolicyError, StandingLimits,
    edit_changes, edit_requirement, standing_failure, strictest_edit_rule,
)
from toolops.decisions.authorization import AuthContext, Effect, GrantSnapshot, Limits, Requirement, authorize

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)

# "payments ≤ 10 EUR auto, ≤ 500 EUR one approver, above that two approvers" (minor units).
PAYMENTS = {
    "thresholds": [{"up_to": 1000, "effect": "allow"}, {"up_to": 50000, "effect": "confirm"},
                   {"effect": "confirm", "approvals": 2}],
    "escalate_after_seconds": 600, "escalation_group": "payments-leads",
}


def grant(policy: dict | None, *, grant_id: str = "g1", effect: str = "allow") -> GrantSnapshot:
    return GrantSnapshot(
        grant_id=grant_id, capability="payments.transfer", operation_class="create", tenant="acme", subject_id=None,
        scope_kind="any", scope_values=(), effect=effect, tool_refs=(), limits=Limits(), expires_at=None, revoked_at=None,
        policy=ApprovalPolicy.from_dict(policy),
    )


def decide(amount: int | None, *grants: GrantSnapshot):
    requirement = Requirement(capability="payments.transfer", operation_class="create", resource=None, amount=amount)
    ctx = AuthContext(tenant="acme", subject_id="s1", tool_ref="payments.transfer@1", now=NOW)
    return authorize(requirements=[requirement], grants=list(grants) or [grant(PAYMENTS)], ctx=ctx)


@pytest.mark.parametrize(("amount", "effect", "approvals"), [
    (0, Effect.ALLOW, 0), (1000, Effect.ALLOW, 0),  # up_to is inclusive: exactly 10.00 EUR runs by itself
    (1001, Effect.CONFIRM, 1), (50000, Effect.CONFIRM, 1),
    (50001, Effect.CONFIRM, 2), (10**9, Effect.CONFIRM, 2),
])
def test_it_applies_the_threshold_tiers_at_their_boundaries(amount, effect, approvals):
    decision = decide(amount)
    assert decision.effect is effect, decision.reasons
    assert decision.approvals_needed == approvals
    if effect is Effect.CONFIRM:
        assert decision.escalation.to_dict() == {"after_seconds": 600, "group": "payments-leads"}
        assert decision.to_dict()["approvals_needed"] == approvals


def test_it_denies_above_the_highest_threshold_without_an_open_tier():
    policy = {"thresholds": [{"up_to": 1000, "effect": "allow"}, {"up_to": 50000, "effect": "confirm"}]}
    assert decide(50000, grant(policy)).effect is Effect.CONFIRM
    denied = decide(50001, grant(policy))
    assert denied.effect is Effect.DENY
    assert POLICY_DENIED in {r.code for r in denied.reasons}


def test_a_deny_tier_denies_and_an_amountless_call_is_denied_under_thresholds():
    policy = {"thresholds": [{"up_to": 500, "effect": "deny"}, {"effect": "allow"}]}
    assert decide(500, grant(policy)).effect is Effect.DENY
    assert decide(501, grant(policy)).effect is Effect.ALLOW
    unknown = decide(None, grant(policy))
    assert unknown.effect is Effect.DENY and POLICY_AMOUNT_UNKNOWN in {r.code for r in unknown.reasons}


def test_a_quorum_without_thresholds_applies_to_a_confirm_grant_only():
    assert decide(5, grant({"approvals": 3}, effect="confirm")).approvals_needed == 3
    assert decide(5, grant({"approvals": 3}, effect="allow")).effect is Effect.ALLOW


def test_the_grant_asking_the_fewest_approvers_serves_and_an_allow_tier_wins():
    two = grant({"approvals": 2}, grant_id="a", effect="confirm")
    one = grant(None, grant_id="b", effect="confirm")
    assert decide(5, two, one).approvals_needed == 1
    assert decide(5, two, grant({"thresholds": [{"up_to": 10, "effect": "allow"}]}, grant_id="c")).effect is Effect.ALLOW


def test_a_snapshot_with_a_policy_round_trips_and_one_without_keeps_its_old_shape():
    with_policy = grant(PAYMENTS)
    assert GrantSnapshot.from_dict(with_policy.to_dict()) == with_policy
    assert "approval_policy" not in grant(None).to_dict()


@pytest.mark.parametrize(("policy", "message"), [
    ({"threshold": []}, "unknown policy keys: threshold"),
    ({"thresholds": [{"up_to": 10, "effect": "maybe"}]}, "effect must be one of"),
    ({"thresholds": [{"up_to": 10, "effect": "allow", "approvals": 2}]}, "approvals only applies to effect confirm"),
    ({"thresholds": [{"up_to": 100, "effect": "allow"}, {"up_to": 100, "effect": "confirm"}]}, "strictly increasing"),
    ({"thresholds": [{"effect": "allow"}, {"up_to": 100, "effect": "confirm"}]}, "only the last tier may omit up_to"),
    ({"thresholds": [{"up_to": "10", "effect": "allow"}]}, "up_to must be an integer"),
    ({"thresholds": [{"up_to": True, "effect": "allow"}]}, "up_to must be an integer"),
    ({"approvals": 0}, "at least 1"),
    ({"approvals": 11}, "at most 10"),
    ({"escalate_after_seconds": 60}, "go together"),
    ({"escalate_after_seconds": 0, "escalation_group": "x"}, "at least 1"),
    ({"escalate_after_seconds": 60, "escalation_group": " "}, "non-empty group name"),
    ([1], "a JSON object"),
])
def test_it_refuses_policies_that_do_not_fit_the_schema(policy, message):
    with pytest.raises(PolicyError, match=message):
        ApprovalPolicy.from_dict(policy)


def test_an_empty_policy_is_no_policy():
    assert ApprovalPolicy.from_dict({}) is None and ApprovalPolicy.from_dict(None) is None


def test_a_standing_approval_compares_amounts_only_in_its_own_currency():
    eur = StandingLimits(max_amount=1000, max_calls=None, currency="EUR")
    common = dict(calls_covered=0, approvals_needed=1, expired=False, revoked=False)
    assert standing_failure(eur, amount=1000, currency="EUR", **common) is None
    assert standing_failure(eur, amount=5, currency="USD", **common)[0] == STANDING_CURRENCY_MISMATCH
    assert standing_failure(eur, amount=5, currency=None, **common)[0] == STANDING_CURRENCY_MISMATCH
    # A cap granted on a call that stated no currency covers only calls that state none either.
    bare = StandingLimits(max_amount=1000, max_calls=None)
    assert standing_failure(bare, amount=5, currency="EUR", **common)[0] == STANDING_CURRENCY_MISMATCH
    assert standing_failure(bare, amount=5, currency=None, **common) is None


def test_an_uncapped_standing_approval_covers_only_its_currency_and_those_the_approver_named():
    common = dict(amount=5, calls_covered=0, approvals_needed=1, expired=False, revoked=False)
    eur = StandingLimits(max_amount=None, max_calls=None, currency="EUR")
    assert standing_failure(eur, currency="EUR", **common) is None
    for other in ("USD", None):
        assert standing_failure(eur, currency=other, **common)[0] == STANDING_CURRENCY_MISMATCH, other
    bare = StandingLimits(max_amount=None, max_calls=None)
    assert standing_failure(bare, currency=None, **common) is None
    assert standing_failure(bare, currency="USD", **common)[0] == STANDING_CURRENCY_MISMATCH
    named = StandingLimits(max_amount=None, max_calls=None, currency="EUR", other_currencies=("USD",))
    assert standing_failure(named, currency="USD", **common) is None
    assert standing_failure(named, currency="GBP", **common)[1] == ("the call is in GBP; the standing approval "
                                                                    "covers EUR, USD")
    # A cap is in one currency: a named other one is never compared with it.
    capped = StandingLimits(max_amount=1000, max_calls=None, currency="EUR", other_currencies=("USD",))
    assert standing_failure(capped, currency="USD", **common)[0] == STANDING_CURRENCY_MISMATCH


@pytest.mark.parametrize(("limits", "amount", "covered", "quorum", "code"), [
    (StandingLimits(max_amount=1000, max_calls=None), 1000, 0, 1, None),  # the cap is inclusive
    (StandingLimits(max_amount=1000, max_calls=None), 1001, 0, 1, STANDING_OVER_AMOUNT),
    (StandingLimits(max_amount=1000, max_calls=None), None, 0, 1, STANDING_AMOUNT_UNKNOWN),
    (StandingLimits(max_amount=None, max_calls=None), None, 0, 1, None),
    (StandingLimits(max_amount=None, max_calls=2), 5, 1, 1, None),
    (StandingLimits(max_amount=None, max_calls=2), 5, 2, 1, STANDING_CALLS_USED),
    (StandingLimits(max_amount=None, max_calls=None), 5, 0, 2, STANDING_QUORUM),
])
def test_a_standing_approval_covers_only_calls_within_its_limits(limits, amount, covered, quorum, code):
    failure = standing_failure(limits, amount=amount, calls_covered=covered, approvals_needed=quorum, expired=False, revoked=False)
    assert (failure[0] if failure else None) == code


# --- approve with edits: maker–checker ----------------------------------------------------------

TRANSFER = {"to_account": "acme-42", "amount": {"amount_minor": 9000, "currency": "EUR"}, "memo": "inv 7", "lines": [3, 2]}


def _with(**changes) -> dict:
    return {**TRANSFER, **changes}


@pytest.mark.parametrize("after, changes", [
    (_with(amount={"amount_minor": 5000, "currency": "EUR"}), ()),  # a smaller amount
    (_with(amount={"amount_minor": 0, "currency": "EUR"}), ()),  # down to zero
    (_with(lines=[1, 2]), ()),  # a smaller number inside a list
    (_with(to_account="acme-43"), ("/to_account",)),  # another recipient
    (_with(memo="pay to 43"), ("/memo",)),  # free text
    (_with(amount={"amount_minor": 9001, "currency": "EUR"}), ("/amount/amount_minor",)),  # a larger amount
    (_with(amount={"amount_minor": 5000, "currency": "USD"}), ("/amount/currency",)),  # another currency
    (_with(amount={"amount_minor": -5000, "currency": "EUR"}), ("/amount/amount_minor",)),  # across zero
    (_with(lines=[3, 2, 1]), ("/lines",)),  # an item added
    ({k: v for k, v in TRANSFER.items() if k != "memo"}, ("/memo",)),  # a member removed
    (_with(extra=True), ("/extra",)),  # a member added
    (_with(memo=7), ("/memo",)),  # another type
])
def test_an_edit_only_narrows_when_every_change_brings_a_number_closer_to_zero(after, changes):
    assert edit_changes(TRANSFER, after) == changes


def test_a_smaller_number_at_a_declared_resource_is_another_resource_not_a_narrower_one():
    before, after = {"account": 1201, "amount": 10}, {"account": 1200, "amount": 5}
    assert edit_changes(before, after) == ()
    assert edit_changes(before, after, resource_pointers=["/account"]) == ("/account",)


def test_negative_numbers_narrow_toward_zero_and_booleans_are_never_numbers():
    assert edit_changes({"delta": -30}, {"delta": -10}) == ()
    assert edit_changes({"delta": -10}, {"delta": -30}) == ("/delta",)
    assert edit_changes({"on": True}, {"on": False}) == ("/on",)


@pytest.mark.parametrize("rule, original, edited, after, needed, second", [
    (EDITS_UNLESS_NARROWING, 2, 1, _with(to_account="x"), 2, True),  # the case: 90 → 50 EUR elsewhere
    (EDITS_UNLESS_NARROWING, 1, 0, _with(to_account="x"), 2, True),  # into an allow tier: still a checker
    (EDITS_UNLESS_NARROWING, 1, 1, _with(lines=[1, 1]), 1, False),  # narrows: the editor alone
    (EDITS_UNLESS_NARROWING, 2, 1, _with(lines=[1, 1]), 2, False),  # narrows, but the original needed two
    (EDITS_UNLESS_NARROWING, 1, 3, _with(to_account="x"), 3, True),  # the edited call needs more
    (EDITS_ALWAYS, 1, 1, _with(lines=[1, 1]), 2, True),  # the policy wants a checker for every edit
])
def test_an_edit_needs_the_larger_quorum_and_a_second_person_unless_it_narrows(rule, original, edited, after, needed, second):
    needs = edit_requirement(rule=rule, original_approvals=original, edited_approvals=edited, before=TRANSFER, after=after)
    assert (needs.approvals_needed, needs.second_person, needs.rule) == (needed, second, rule)


def test_the_edits_rule_is_part_of_a_policy_and_the_strictest_one_wins():
    always = ApprovalPolicy.from_dict({"edits": "second_person_always"})
    assert always.to_dict() == {"edits": "second_person_always"}
    assert ApprovalPolicy.from_dict({"approvals": 2}).edits == EDITS_UNLESS_NARROWING  # the safe default
    assert strictest_edit_rule([None, ApprovalPolicy.from_dict({"approvals": 2}).edits, always.edits]) == EDITS_ALWAYS
    assert strictest_edit_rule([]) == EDITS_UNLESS_NARROWING
    with pytest.raises(PolicyError, match="edits must be one of"):
        ApprovalPolicy.from_dict({"edits": "editor_alone"})
