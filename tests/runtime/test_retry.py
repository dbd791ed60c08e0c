"""The retry matrix of docs/concepts/failures.md: every cell, backoff, jitter, Retry-After, deadline and budgets."""
from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolops.decisions.retry import (
    FAILURE_CLASSES,
    SIDE_EFFECT_CLASSES,
    Action,
    RetryDecision,
    RetryPolicy,
    backoff_seconds,
    decide_retry,
)

NOW = datetime(2026, 7, 19, 14, 0, tzinfo=timezone(timedelta(hours=8)))
HALF = lambda: 0.5  # noqa: E731 - a fixed "random" makes every decision exact
RETRY, RECONCILE, STOP = "retry", Action.RECONCILE, Action.STOP


def decide(**overrides) -> RetryDecision:
    kwargs = dict(
        failure_class="transient", side_effect_class="read_only", attempt=1, policy=RetryPolicy(),
        now=NOW, deadline=None, random=HALF,
    )
    kwargs.update(overrides)
    return decide_retry(**kwargs)


# The matrix written out independently of the module: (failure, side effect) -> (action, reason).
MATRIX = {
    ("not_reached", "read_only"): (RETRY, "not_reached_retry"),
    ("not_reached", "write_idempotent"): (RETRY, "not_reached_retry"),
    ("not_reached", "write_unsafe"): (RETRY, "not_reached_retry"),
    ("rate_limited", "read_only"): (RETRY, "rate_limited_backoff"),
    ("rate_limited", "write_idempotent"): (RETRY, "rate_limited_backoff"),
    ("rate_limited", "write_unsafe"): (RETRY, "rate_limited_backoff"),
    ("transient", "read_only"): (RETRY, "transient_backoff"),
    ("transient", "write_idempotent"): (RETRY, "transient_backoff"),
    ("transient", "write_unsafe"): (RECONCILE, "transient_may_have_committed"),
    ("timeout_unknown", "read_only"): (RETRY, "timeout_reread"),
    ("timeout_unknown", "write_idempotent"): (RECONCILE, "unknown_outcome_lookup_by_key"),
    ("timeout_unknown", "write_unsafe"): (RECONCILE, "unknown_outcome_unsafe"),
    ("business_rejected", "read_only"): (STOP, "business_rejected"),
    ("business_rejected", "write_idempotent"): (STOP, "business_rejected"),
    ("business_rejected", "write_unsafe"): (STOP, "business_rejected"),
    ("permanent", "read_only"): (STOP, "permanent"),
    ("permanent", "write_idempotent"): (STOP, "permanent"),
    ("permanent", "write_unsafe"): (STOP, "permanent"),
}
RETRY_CELLS = sorted(cell for cell, (action, _) in MATRIX.items() if action == RETRY)
RECONCILE_CELLS = sorted(cell for cell, (action, _) in MATRIX.items() if action == RECONCILE)
STOP_CELLS = sorted(cell for cell, (action, _) in MATRIX.items() if action == STOP)


def test_it_covers_every_cell_of_the_matrix_in_these_tests():
    assert set(MATRIX) == {(f, s) for f in FAILURE_CLASSES for s in SIDE_EFFECT_CLASSES}
    assert len(MATRIX) == 18


@pytest.mark.parametrize(("failure_class", "side_effect_class"), sorted(MATRIX))
def test_it_decides_each_cell_of_the_matrix(failure_class, side_effect_class):
    expected_action, expected_reason = MATRIX[(failure_class, side_effect_class)]
    d = decide(failure_class=failure_class, side_effect_class=side_effect_class)
    assert d.reason == expected_reason
    if expected_action == RETRY:
        # Attempt 1, default policy: backoff 1s, random 0.5 -> wait 0.5s.
        assert (d.action, d.delay_seconds, d.backoff_seconds, d.jitter_seconds) == (Action.RETRY_AFTER, 0.5, 1.0, 0.5)
    else:
        assert (d.action, d.delay_seconds, d.backoff_seconds, d.jitter_seconds) == (expected_action, 0.0, 0.0, 0.0)


def test_it_never_blindly_retries_a_write_that_may_have_committed():
    # The two cells docs/concepts/lifecycle.md is about: a 5xx or a timeout on a write without an idempotency key.
    for failure in ("transient", "timeout_unknown"):
        assert decide(failure_class=failure, side_effect_class="write_unsafe").action == Action.RECONCILE


def test_it_retries_a_rate_limited_unsafe_write_because_429_is_a_refusal_before_processing():
    d = decide(failure_class="rate_limited", side_effect_class="write_unsafe")
    assert d.action == Action.RETRY_AFTER


# --- backoff and jitter ---------------------------------------------------------------------


def test_it_grows_the_backoff_exponentially_and_caps_it():
    policy = RetryPolicy(initial_interval=1, backoff_coefficient=2, maximum_interval=10, maximum_attempts=0)
    assert [backoff_seconds(attempt=a, policy=policy) for a in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    decisions = [decide(attempt=a, policy=policy, random=lambda: 1.0) for a in range(1, 7)]
    assert [d.backoff_seconds for d in decisions] == [1, 2, 4, 8, 10, 10]


def test_it_caps_the_backoff_for_an_attempt_number_too_large_for_a_float():
    policy = RetryPolicy(maximum_attempts=0, maximum_interval=30)
    d = decide(attempt=100_000, policy=policy)
    assert (d.action, d.backoff_seconds, d.delay_seconds) == (Action.RETRY_AFTER, 30.0, 15.0)


def test_it_keeps_a_constant_backoff_with_coefficient_one():
    policy = RetryPolicy(initial_interval=3, backoff_coefficient=1, maximum_attempts=0)
    assert {decide(attempt=a, policy=policy).backoff_seconds for a in range(1, 20)} == {3.0}


@given(
    r=st.floats(min_value=0, max_value=1, exclude_max=True),
    attempt=st.integers(min_value=1, max_value=40),
)
def test_it_keeps_full_jitter_between_zero_and_the_backoff(r, attempt):
    policy = RetryPolicy(maximum_attempts=0)
    d = decide(attempt=attempt, policy=policy, random=lambda: r)
    assert 0 <= d.delay_seconds <= d.backoff_seconds <= policy.maximum_interval
    assert math.isclose(d.delay_seconds + d.jitter_seconds, d.backoff_seconds)
    assert d.delay_seconds == r * d.backoff_seconds


@pytest.mark.parametrize(("r", "delay", "jitter"), [(0.25, 1.0, 3.0), (0.75, 3.0, 1.0), (0.999, 3.996, 0.004)])
def test_it_applies_full_jitter_with_a_fixed_random(r, delay, jitter):
    d = decide(attempt=3, random=lambda: r)  # backoff 1 * 2**2 = 4
    assert d.backoff_seconds == 4.0
    assert math.isclose(d.delay_seconds, delay) and math.isclose(d.jitter_seconds, jitter)


def test_it_retries_now_when_the_jittered_delay_is_zero():
    d = decide(random=lambda: 0.0)
    assert (d.action, d.delay_seconds, d.jitter_seconds) == (Action.RETRY_NOW, 0.0, 1.0)


def test_it_is_deterministic_given_random():
    assert decide(attempt=4, random=lambda: 0.3) == decide(attempt=4, random=lambda: 0.3)


def test_it_refuses_a_random_outside_zero_to_one():
    with pytest.raises(ValueError, match="random"):
        decide(random=lambda: 1.5)


# --- Retry-After ----------------------------------------------------------------------------


def test_it_treats_retry_after_as_a_floor():
    d = decide(failure_class="rate_limited", retry_after_seconds=7)
    assert (d.action, d.delay_seconds, d.backoff_seconds, d.retry_after_seconds) == (Action.RETRY_AFTER, 7.0, 1.0, 7.0)
    assert d.jitter_seconds == 0.5  # jitter is still what full jitter removed, recorded apart


def test_it_keeps_the_jittered_delay_when_it_exceeds_retry_after():
    d = decide(failure_class="rate_limited", attempt=4, retry_after_seconds=1)  # backoff 8, delay 4
    assert (d.delay_seconds, d.retry_after_seconds) == (4.0, 1.0)


def test_it_lets_retry_after_exceed_the_maximum_interval():
    d = decide(failure_class="rate_limited", retry_after_seconds=120, policy=RetryPolicy(maximum_interval=60))
    assert d.delay_seconds == 120.0


def test_it_counts_a_retry_after_in_the_past_as_zero():
    d = decide(failure_class="rate_limited", retry_after_seconds=-30, random=lambda: 0.0)
    assert (d.action, d.delay_seconds, d.retry_after_seconds) == (Action.RETRY_NOW, 0.0, 0.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "5", True])
def test_it_refuses_a_malformed_retry_after(bad):
    with pytest.raises(ValueError, match="retry_after_seconds"):
        decide(retry_after_seconds=bad)


# --- deadline -------------------------------------------------------------------------------


def test_it_stops_when_the_delay_would_reach_the_deadline():
    d = decide(deadline=NOW + timedelta(seconds=0.5))  # delay 0.5 lands exactly on it
    assert (d.action, d.reason, d.delay_seconds) == (Action.STOP, "deadline", 0.0)
    assert (d.backoff_seconds, d.jitter_seconds) == (1.0, 0.5)  # still recorded for the trace


def test_it_retries_when_the_delay_ends_before_the_deadline():
    d = decide(deadline=NOW + timedelta(seconds=0.51))
    assert (d.action, d.delay_seconds) == (Action.RETRY_AFTER, 0.5)


def test_it_stops_when_retry_after_pushes_past_the_deadline():
    d = decide(failure_class="rate_limited", retry_after_seconds=3600, deadline=NOW + timedelta(minutes=10))
    assert (d.action, d.reason) == (Action.STOP, "deadline")


def test_it_stops_an_immediate_retry_once_the_deadline_has_passed():
    d = decide(random=lambda: 0.0, deadline=NOW - timedelta(seconds=1))
    assert (d.action, d.reason) == (Action.STOP, "deadline")


def test_it_compares_the_deadline_across_time_zones():
    deadline = (NOW + timedelta(seconds=10)).astimezone(timezone.utc)
    assert decide(deadline=deadline).action == Action.RETRY_AFTER


def test_it_survives_a_retry_after_too_large_for_datetime_arithmetic():
    d = decide(failure_class="rate_limited", retry_after_seconds=1e300, deadline=NOW + timedelta(days=1))
    assert (d.action, d.reason) == (Action.STOP, "deadline")


@pytest.mark.parametrize(("failure_class", "side_effect_class"), RECONCILE_CELLS)
def test_it_reconciles_even_after_the_deadline(failure_class, side_effect_class):
    d = decide(failure_class=failure_class, side_effect_class=side_effect_class, deadline=NOW - timedelta(hours=1))
    assert d.action == Action.RECONCILE


@pytest.mark.parametrize("now", [datetime(2026, 7, 19, 14, 0), "2026-07-19T14:00:00Z"])
def test_it_refuses_a_naive_or_non_datetime_now(now):
    with pytest.raises(ValueError, match="now"):
        decide(now=now)


def test_it_refuses_a_naive_deadline():
    with pytest.raises(ValueError, match="deadline"):
        decide(deadline=datetime(2026, 7, 19, 15, 0))


# --- attempts -------------------------------------------------------------------------------


def test_it_stops_at_maximum_attempts():
    policy = RetryPolicy(maximum_attempts=3)
    assert [decide(attempt=a, policy=policy).action for a in (1, 2, 3, 4)] == [
        Action.RETRY_AFTER, Action.RETRY_AFTER, Action.STOP, Action.STOP,
    ]
    assert decide(attempt=3, policy=policy).reason == "max_attempts"


def test_it_allows_one_attempt_only_with_maximum_attempts_one():
    d = decide(attempt=1, policy=RetryPolicy(maximum_attempts=1))
    assert (d.action, d.reason) == (Action.STOP, "max_attempts")


def test_it_treats_zero_maximum_attempts_as_unlimited():
    d = decide(attempt=10_000, policy=RetryPolicy(maximum_attempts=0))
    assert d.action == Action.RETRY_AFTER


@pytest.mark.parametrize(("failure_class", "side_effect_class"), RECONCILE_CELLS)
def test_it_reconciles_even_when_the_attempts_are_used_up(failure_class, side_effect_class):
    d = decide(failure_class=failure_class, side_effect_class=side_effect_class, attempt=9,
               policy=RetryPolicy(maximum_attempts=2))
    assert d.action == Action.RECONCILE


@pytest.mark.parametrize("attempt", [0, -1, 1.0, True, None])
def test_it_refuses_an_attempt_that_is_not_a_positive_integer(attempt):
    with pytest.raises(ValueError, match="attempt"):
        decide(attempt=attempt)


def test_it_refuses_unknown_classes():
    with pytest.raises(ValueError, match="failure_class"):
        decide(failure_class="timeout")
    with pytest.raises(ValueError, match="side_effect_class"):
        decide(side_effect_class="write")


# --- non_retryable --------------------------------------------------------------------------


@pytest.mark.parametrize(("failure_class", "side_effect_class"), RETRY_CELLS)
def test_it_stops_a_non_retryable_class(failure_class, side_effect_class):
    policy = RetryPolicy(non_retryable=(failure_class,))
    d = decide(failure_class=failure_class, side_effect_class=side_effect_class, policy=policy)
    assert (d.action, d.reason, d.delay_seconds) == (Action.STOP, "non_retryable", 0.0)


@pytest.mark.parametrize(("failure_class", "side_effect_class"), RECONCILE_CELLS)
def test_it_still_reconciles_a_non_retryable_unknown_outcome(failure_class, side_effect_class):
    policy = RetryPolicy(non_retryable=(failure_class,))
    d = decide(failure_class=failure_class, side_effect_class=side_effect_class, policy=policy)
    assert d.action == Action.RECONCILE


def test_it_leaves_other_classes_retryable():
    policy = RetryPolicy(non_retryable=("rate_limited",))
    assert decide(failure_class="transient", policy=policy).action == Action.RETRY_AFTER


@pytest.mark.parametrize(("failure_class", "side_effect_class"), STOP_CELLS)
def test_it_keeps_the_business_reason_when_a_stop_class_is_also_non_retryable(failure_class, side_effect_class):
    policy = RetryPolicy(non_retryable=(failure_class,))
    d = decide(failure_class=failure_class, side_effect_class=side_effect_class, policy=policy)
    assert (d.action, d.reason) == (Action.STOP, failure_class)


def test_it_checks_non_retryable_before_attempts_and_attempts_before_the_deadline():
    policy = RetryPolicy(maximum_attempts=1, non_retryable=("transient",))
    assert decide(policy=policy, deadline=NOW).reason == "non_retryable"
    assert decide(policy=RetryPolicy(maximum_attempts=1), deadline=NOW).reason == "max_attempts"


# --- serialization --------------------------------------------------------------------------


@pytest.mark.parametrize(("failure_class", "side_effect_class"), sorted(MATRIX))
def test_it_gives_a_json_able_decision(failure_class, side_effect_class):
    d = decide(failure_class=failure_class, side_effect_class=side_effect_class, retry_after_seconds=2)
    data = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert data == {
        "action": str(d.action), "delay_seconds": d.delay_seconds, "backoff_seconds": d.backoff_seconds,
        "jitter_seconds": d.jitter_seconds, "reason": d.reason, "retry_after_seconds": 2.0,
    }
    assert data["action"] in {a.value for a in Action}


def test_it_round_trips_a_policy_through_json():
    policy = RetryPolicy(initial_interval=0.5, backoff_coefficient=3, maximum_interval=45,
                         maximum_attempts=7, non_retryable=("rate_limited", "not_reached"))
    data = json.loads(json.dumps(policy.to_dict()))
    assert RetryPolicy.from_dict(data) == policy
    assert data == {"initial_interval": 0.5, "backoff_coefficient": 3.0, "maximum_interval": 45.0,
                    "maximum_attempts": 7, "non_retryable": ["rate_limited", "not_reached"]}


@pytest.mark.parametrize("d", [None, {}])
def test_it_gives_the_default_policy_for_an_empty_one(d):
    assert RetryPolicy.from_dict(d) == RetryPolicy()
    assert RetryPolicy().to_dict() == {"initial_interval": 1.0, "backoff_coefficient": 2.0, "maximum_interval": 60.0,
                                       "maximum_attempts": 5, "non_retryable": []}


def test_it_reads_the_demo_policy_with_integer_intervals():
    policy = RetryPolicy.from_dict({"initial_interval": 1, "backoff_coefficient": 2, "maximum_interval": 30,
                                    "maximum_attempts": 5})
    assert (policy.initial_interval, policy.maximum_interval) == (1.0, 30.0)
    assert isinstance(policy.initial_interval, float)


@pytest.mark.parametrize(
    ("d", "match"),
    [
        ({"initialInterval": 1}, "unknown retry_policy key"),
        ({"max_attempts": 3}, "unknown retry_policy key"),
        ([], "must be an object"),
        ({"initial_interval": 0}, "initial_interval"),
        ({"initial_interval": -1}, "initial_interval"),
        ({"initial_interval": "1"}, "initial_interval"),
        ({"initial_interval": float("nan")}, "initial_interval"),
        ({"initial_interval": True}, "initial_interval"),
        ({"backoff_coefficient": 0.5}, "backoff_coefficient"),
        ({"backoff_coefficient": float("inf")}, "backoff_coefficient"),
        ({"maximum_interval": 0.5, "initial_interval": 1}, "maximum_interval"),
        ({"maximum_attempts": -1}, "maximum_attempts"),
        ({"maximum_attempts": 2.5}, "maximum_attempts"),
        ({"maximum_attempts": 3.0}, "maximum_attempts"),
        ({"maximum_attempts": False}, "maximum_attempts"),
        ({"non_retryable": "transient"}, "non_retryable"),
        ({"non_retryable": ["timeout"]}, "unknown failure class"),
        ({"non_retryable": ["transient", "transient"]}, "twice"),
        ({"non_retryable": None}, "non_retryable"),
    ],
)
def test_it_refuses_an_invalid_policy(d, match):
    with pytest.raises(ValueError, match=match):
        RetryPolicy.from_dict(d)


def test_it_validates_a_policy_built_directly():
    with pytest.raises(ValueError, match="backoff_coefficient"):
        RetryPolicy(backoff_coefficient=0)
    assert RetryPolicy(non_retryable=["transient"]).non_retryable == ("transient",)
