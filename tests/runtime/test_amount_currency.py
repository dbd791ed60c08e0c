"""Money limits carry their currency (pure core, no database): grant amount limits and approval-policy
thresholds are minor units of a named currency; a call in another currency, or of unknown
currency, is never compared against them; limits stored before they had a currency are read with
the legacy currency the shell passes in."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from toolops.decisions.approval_policy import (
    POLICY_CURRENCY_MISMATCH, POLICY_CURRENCY_UNKNOWN, POLICY_TIER, ApprovalPolicy, PolicyError,
)
from toolops.decisions.authorization import (
    AMOUNT_CURRENCY_MISMATCH, AMOUNT_CURRENCY_UNKNOWN, AMOUNT_OVER_CALL_LIMIT, AuthContext, Effect, GrantSnapshot, Limits,
    Requirement, authorize,
)
from toolops.decisions.requirements import amount_currency, requirements_for

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
EUR_500 = {"currency": "EUR", "max_amount_per_call": 50_000}


def grant(*, limits: Limits = Limits(), policy: ApprovalPolicy | None = None) -> GrantSnapshot:
    return GrantSnapshot(
        grant_id="g1", capability="payments.transfer", operation_class="create", tenant="acme", subject_id=None,
        scope_kind="any", scope_values=(), effect="allow", tool_refs=(), limits=limits, expires_at=None, revoked_at=None,
        policy=policy,
    )


def decide(amount: int, currency: str | None, g: GrantSnapshot):
    requirement = Requirement(capability="payments.transfer", operation_class="create", resource=None, amount=amount,
                              currency=currency)
    ctx = AuthContext(tenant="acme", subject_id="s1", tool_ref="payments.transfer@1", now=NOW)
    return authorize(requirements=[requirement], grants=[g], ctx=ctx)


@pytest.mark.parametrize(("amount", "currency", "effect", "code"), [
    (50_000, "EUR", Effect.ALLOW, None),
    (50_001, "EUR", Effect.DENY, AMOUNT_OVER_CALL_LIMIT),
    (100, "USD", Effect.DENY, AMOUNT_CURRENCY_MISMATCH),  # 1.00 USD is not "under 500.00 EUR": never compared
    (100, "JPY", Effect.DENY, AMOUNT_CURRENCY_MISMATCH),
    (100, None, Effect.DENY, AMOUNT_CURRENCY_UNKNOWN),  # fail closed when the ToolSpec says no currency
])
def test_a_grant_limit_covers_only_calls_in_its_own_currency(amount, currency, effect, code):
    decision = decide(amount, currency, grant(limits=Limits.from_dict(EUR_500)))
    assert decision.effect is effect, decision.reasons
    codes = {r.code for r in decision.reasons}
    if code:
        assert code in codes
    if code in (AMOUNT_CURRENCY_MISMATCH, AMOUNT_CURRENCY_UNKNOWN):
        message = next(r.message for r in decision.reasons if r.code == code)
        assert "EUR" in message and (currency or "not known") in message


def test_the_window_limit_is_in_the_same_currency():
    limits = Limits.from_dict({"currency": "EUR", "max_amount_per_window": 1000, "amount_window_seconds": 3600})
    assert decide(10, "GBP", grant(limits=limits)).effect is Effect.DENY
    assert decide(10, "EUR", grant(limits=limits)).effect is Effect.ALLOW


def test_limits_round_trip_with_their_currency_and_refuse_nonsense():
    assert Limits.from_dict(EUR_500).to_dict() == EUR_500
    with pytest.raises(ValueError, match="ISO 4217"):
        Limits.from_dict({"currency": "EURO", "max_amount_per_call": 1})
    with pytest.raises(ValueError, match="currency goes with an amount limit"):
        Limits.from_dict({"currency": "EUR", "calls_per_minute": 5})


def test_a_legacy_limit_is_read_in_the_legacy_currency_and_an_old_record_as_it_was():
    stored = {"max_amount_per_call": 50_000}  # a row saved before limits had a currency
    live = Limits.from_dict(stored, legacy_currency="EUR")
    assert live.currency == "EUR"
    assert decide(100, "USD", grant(limits=live)).effect is Effect.DENY
    assert decide(50_000, "EUR", grant(limits=live)).effect is Effect.ALLOW
    assert Limits.from_dict({"calls_per_minute": 5}, legacy_currency="EUR").currency is None  # no amount, no currency
    # A stored decision record is re-checked as it was decided (no currency then, no currency check now).
    record = Limits.from_dict(stored)
    assert record.currency is None and decide(100, "USD", grant(limits=record)).effect is Effect.ALLOW


POLICY = {"currency": "EUR", "thresholds": [{"up_to": 1000, "effect": "allow"}, {"effect": "confirm"}]}


@pytest.mark.parametrize(("currency", "effect", "code"), [
    ("EUR", Effect.ALLOW, POLICY_TIER), ("USD", Effect.DENY, POLICY_CURRENCY_MISMATCH), (None, Effect.DENY, POLICY_CURRENCY_UNKNOWN),
])
def test_policy_thresholds_apply_only_to_their_currency(currency, effect, code):
    decision = decide(500, currency, grant(policy=ApprovalPolicy.from_dict(POLICY)))
    assert decision.effect is effect and code in {r.code for r in decision.reasons}, decision.reasons


def test_a_policy_round_trips_its_currency_and_a_legacy_one_takes_the_shells():
    assert ApprovalPolicy.from_dict(POLICY).to_dict()["currency"] == "EUR"
    legacy = {"thresholds": [{"up_to": 1000, "effect": "allow"}]}
    assert ApprovalPolicy.from_dict(legacy).currency is None
    assert ApprovalPolicy.from_dict(legacy, legacy_currency="EUR").currency == "EUR"
    assert ApprovalPolicy.from_dict({"approvals": 2}, legacy_currency="EUR").currency is None
    with pytest.raises(PolicyError, match="ISO 4217"):
        ApprovalPolicy.from_dict({**POLICY, "currency": "eur"})
    with pytest.raises(PolicyError, match="currency goes with thresholds"):
        ApprovalPolicy.from_dict({"currency": "EUR", "approvals": 2})


FROM_VALUE = [{"pointer": "/amount", "normalizer": "currency_minor_units", "options": {"currency": "from_value"}}]
FIXED = [{"pointer": "/total", "normalizer": "currency_minor_units", "options": {"currency": "JPY"}}]


def test_the_calls_currency_comes_from_the_normalizer_that_produced_the_amount():
    arguments = {"amount": {"amount_minor": 1250, "currency": "USD"}, "total": 500}
    assert amount_currency(arguments, "/amount/amount_minor", FROM_VALUE) == "USD"
    assert amount_currency(arguments, "/total", FIXED) == "JPY"
    assert amount_currency(arguments, "/total", FROM_VALUE) is None  # nothing declares it: never guessed
    assert amount_currency(arguments, "/amount/amount_minor", None) is None
    declared = [{"capability": "payments.transfer", "amount_pointer": "/amount/amount_minor"}]
    [requirement] = requirements_for(declared=declared, operation_classes={"payments.transfer": "create"},
                                     arguments=arguments, normalizers=FROM_VALUE)
    assert (requirement.amount, requirement.currency) == (1250, "USD")


def test_a_capability_entry_may_declare_the_currency_itself():
    """For amounts no currency normalizer produced (integers already in minor units)."""
    arguments = {"amount_minor": 700, "ccy": "GBP"}
    classes = {"ledger.spend": "create"}
    fixed = [{"capability": "ledger.spend", "amount_pointer": "/amount_minor", "currency": "EUR"}]
    pointed = [{"capability": "ledger.spend", "amount_pointer": "/amount_minor", "currency_pointer": "/ccy"}]
    silent = [{"capability": "ledger.spend", "amount_pointer": "/amount_minor"}]
    assert requirements_for(declared=fixed, operation_classes=classes, arguments=arguments)[0].currency == "EUR"
    assert requirements_for(declared=pointed, operation_classes=classes, arguments=arguments)[0].currency == "GBP"
    assert requirements_for(declared=silent, operation_classes=classes, arguments=arguments)[0].currency is None
    from toolops.decisions.requirements import RequirementError

    with pytest.raises(RequirementError, match="ISO 4217"):
        requirements_for(declared=[{**fixed[0], "currency": "euro"}], operation_classes=classes, arguments=arguments)
