"""Grant amount limits and approval-policy thresholds carry their currency, through the services on
PostgreSQL: a call in another currency is refused with a clear reason (never compared in minor
units), saving a money limit without its currency is refused, rows saved before limits had a
currency are read in ``TOOLOPS_LEGACY_AMOUNT_CURRENCY``, and the approver reads the limit in
major units of its currency."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from invocations_app.approval_display import approval_display
from invocations_app.models import Confirmation
from specs_app.services import grant_create, grant_validate
from tests.builders import (
    OneRun, fresh, make_capability, make_grant, make_payments_spec, make_staff, make_subject, make_tenant, payment_args,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def payments():
    return make_payments_spec()


def _run(payments, **grant) -> OneRun:
    subject = make_subject(tenant=make_tenant(), name="finance-bot")
    make_grant(subject=subject, capability="payments.transfer", operation_class="create", **grant)
    return OneRun(subject=subject, spec=payments)


def _codes(invocation) -> set[str]:
    return {r["code"] for r in fresh(invocation).authorization["reasons"]}


def test_a_limit_in_eur_does_not_cover_a_call_in_another_currency(payments):
    run = _run(payments, limits={"currency": "EUR", "max_amount_per_call": 50_000})
    assert run.propose(payment_args(40_000)).state == "PREPARED"  # 400.00 EUR
    for currency in ("USD", "JPY"):
        refused = fresh(run.propose(payment_args(100, currency=currency)))  # 1.00 USD: small, but not EUR
        assert refused.state == "AUTHORIZATION_REJECTED", refused.state
        assert "amount_currency_mismatch" in _codes(refused) and "amount_currency_mismatch" in refused.error_message
        messages = [r["message"] for r in refused.authorization["reasons"]]
        assert f"the call is in {currency}; this grant's amount limits are in EUR" in messages


def test_a_legacy_limit_without_currency_is_read_in_the_legacy_currency(payments, settings):
    run = _run(payments, limits={"max_amount_per_call": 50_000})  # saved before limits had a currency
    assert run.propose(payment_args(40_000)).state == "PREPARED"
    refused = run.propose(payment_args(100, currency="USD"))
    assert refused.state == "AUTHORIZATION_REJECTED" and "amount_currency_mismatch" in _codes(refused)
    assert fresh(run.propose(payment_args(40_000))).authorization["capabilities"][0]["limits"]["currency"] == "EUR"
    settings.TOOLOPS_LEGACY_AMOUNT_CURRENCY = "USD"  # a deployment whose old limits were dollars
    assert run.propose(payment_args(100, currency="USD")).state == "PREPARED"


def test_policy_thresholds_in_eur_deny_a_call_in_another_currency(payments):
    policy = {"currency": "EUR", "thresholds": [{"up_to": 1000, "effect": "allow"}, {"effect": "confirm"}]}
    run = _run(payments, approval_policy=policy)
    assert run.propose(payment_args(900)).state == "PREPARED"
    refused = run.propose(payment_args(900, currency="GBP"))
    assert refused.state == "AUTHORIZATION_REJECTED" and "policy_currency_mismatch" in _codes(refused)
    legacy = _run(payments, approval_policy={"thresholds": [{"up_to": 1000, "effect": "allow"}]})  # read as EUR
    assert legacy.propose(payment_args(900)).state == "PREPARED"
    assert "policy_currency_mismatch" in _codes(legacy.propose(payment_args(900, currency="USD")))


def _values(**overrides) -> dict:
    values = dict(capability=make_capability(name="payments.transfer", operation_class="create"), tenant=make_tenant(),
                  subject=None, scope_kind="any", scope_values=[], limits={}, effect="allow",
                  tool_refs=["payments.transfer@1"], expires_at=None)
    return {**values, **overrides}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("limits", {"max_amount_per_call": 50_000}, "amount limits need their currency"),
    ("limits", {"max_amount_per_window": 10, "amount_window_seconds": 60}, "amount limits need their currency"),
    ("limits", {"currency": "XYZ", "max_amount_per_call": 1}, "ISO 4217"),
    ("limits", {"currency": "EUR", "calls_per_minute": 5}, "currency goes with an amount limit"),
    ("approval_policy", {"thresholds": [{"up_to": 10, "effect": "allow"}]}, "thresholds need their currency"),
])
def test_saving_a_money_limit_without_its_currency_is_refused(payments, field, value, message):
    with pytest.raises(ValidationError) as refused:
        grant_validate(**_values(**{field: value}))
    assert message in " ".join(refused.value.message_dict[field])


def test_a_grant_saved_with_its_currency_keeps_it(payments):
    boss = make_staff(username="boss", superuser=True)
    policy = {"currency": "JPY", "thresholds": [{"up_to": 50_000, "effect": "allow"}]}
    grant = grant_create(user=boss, reason="yen payments", approval_policy=policy,
                         **_values(limits={"currency": "JPY", "max_amount_per_call": 100_000}))
    grant.refresh_from_db()
    assert grant.limits == {"currency": "JPY", "max_amount_per_call": 100_000}
    assert grant.approval_policy["currency"] == "JPY"


def test_a_toolspec_policy_with_thresholds_names_its_currency():
    with pytest.raises(ValidationError, match="thresholds need their currency"):
        make_payments_spec(confirmation_policy={"approval": {"thresholds": [{"up_to": 10, "effect": "allow"}]}})


def test_the_approver_reads_the_limit_and_the_tiers_in_major_units_of_their_currency(payments):
    policy = {"currency": "EUR", "thresholds": [{"up_to": 1000, "effect": "allow"}, {"effect": "confirm"}]}
    run = _run(payments, effect="confirm", limits={"currency": "EUR", "max_amount_per_call": 50_000}, approval_policy=policy)
    confirmation = Confirmation.objects.select_related("invocation__proposal", "tool_spec").get(
        invocation=run.propose(payment_args(12_50)))
    why = approval_display(confirmation)["why"]
    [grant] = why["grants"]
    assert grant["limits"] == ["max 500.00 EUR per call"]
    assert grant["policy"] == ["up to 10.00 EUR: runs without a person", "above 10.00 EUR: 1 approver(s)"]
    assert "50000" not in why["text"] and "50,000" not in why["text"]
