"""A model call records the message each invocation in its context gave the model
(``tool_messages.carried_message_rows``) with a fixed number of queries, not a few per row."""
from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from invocations_app import runs
from invocations_app.confirmation_edits import confirmation_approve_with_edits, confirmation_preview_edit
from invocations_app.confirmations import confirmation_deny
from invocations_app.models import Confirmation, ModelCallMessage
from invocations_app.tool_messages import current_message
from tests.builders import OneRun, fresh, make_finance_subject, make_payments_spec, payment_args

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    spec = make_payments_spec()
    return OneRun(subject=make_finance_subject(), spec=spec)


@pytest.fixture
def approver():
    return User.objects.create_user("ann", is_staff=True)


def _one_of_each(world: OneRun, approver) -> list:
    """An invocation in every shape a context can name: running (nothing to say yet), awaiting a
    person, rejected and denied (stored final messages), and an approver's edit still waiting for
    a second approver (interim message naming the edit, answering the original's tool-call id)."""
    running = world.propose(payment_args(500))  # <= 10 EUR: allowed, not finished
    waiting = world.propose(payment_args(20_000))
    rejected = world.propose({"to_account": "x", "amount": {"amount": "twelve", "currency": "EUR"}})
    denied = world.propose(payment_args(30_000))
    confirmation_deny(confirmation=Confirmation.objects.get(invocation=denied), user=approver, reason="not this month")
    original = world.propose(payment_args(40_000))
    pending = Confirmation.objects.get(invocation=original)
    edited = {**pending.arguments, "amount": {"amount": "900.00", "currency": "EUR"}}  # above 500 EUR: two approvers
    plan = confirmation_preview_edit(confirmation=pending, edited_arguments=edited)
    replacement = confirmation_approve_with_edits(confirmation=pending, user=approver, digest_seen=pending.digest,
                                                  edited_arguments=edited, new_digest_seen=plan.digest, reason="the invoice says 900")
    assert rejected.state == "VALIDATION_REJECTED", rejected.state
    return [running, waiting, rejected, denied, original, replacement]


def _carry(world: OneRun, invocations) -> tuple[int, list[ModelCallMessage]]:
    with CaptureQueriesContext(connection) as queries:
        call = runs.model_call_create(run=world.run, tool_refs=[world.spec.ref], fmt="openai",
                                      context=[str(i.pk) for i in invocations])
    return len(queries.captured_queries), list(ModelCallMessage.objects.filter(model_call=call).order_by("id"))


def test_carrying_messages_costs_the_same_queries_for_one_or_many(world, approver):
    first = _one_of_each(world, approver)
    _carry(world, first[:1])  # warm the per-process caches (capabilities, published ToolSpecs)
    one, rows_one = _carry(world, first[1:2])
    six, rows_six = _carry(world, first)
    more = first + _one_of_each(world, approver) + _one_of_each(world, approver)
    eighteen, rows_eighteen = _carry(world, more)
    assert len(rows_one) == 1 and rows_one[0].kind == "awaiting_confirmation"
    assert six == eighteen, f"{six} queries for 6 carried invocations, {eighteen} for 18"
    assert six <= one + 4, f"{one} queries for one carried message, {six} for six"
    # Every shape is carried (the running one has nothing to say yet) ...
    kinds = sorted(r.kind for r in rows_six)
    assert kinds == ["awaiting_confirmation"] * 3 + ["final"] * 2, kinds  # the edited original answers with its edit
    assert len(rows_eighteen) == 15


def test_the_batched_rows_are_the_bytes_the_model_reads(world, approver):
    invocations = _one_of_each(world, approver)
    _, rows = _carry(world, invocations)
    by_invocation = {r.invocation_id: r for r in rows}
    for invocation in invocations:
        expected = current_message(invocation=fresh(invocation), fmt="openai")
        row = by_invocation.get(invocation.pk)
        if expected is None:
            assert row is None
            continue
        assert (row.kind, bytes(row.message_bytes)) == expected, invocation.state
        assert row.sha256 == hashlib.sha256(expected[1]).hexdigest()
    # The edited original answers the model's id with the edit's interim message.
    original, replacement = invocations[4], invocations[5]
    assert bytes(by_invocation[original.pk].message_bytes) == bytes(by_invocation[replacement.pk].message_bytes)
    assert b"call_5" in bytes(by_invocation[replacement.pk].message_bytes)
