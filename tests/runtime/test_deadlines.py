"""A call's deadline and the timeout policy (pure), and Retry-After in both RFC 9110 forms."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from toolops.decisions.deadlines import DEFAULT_DEADLINE_SECONDS, TimeoutPolicy, call_deadline
from toolops.decisions.execution import MAX_RETRY_AFTER_SECONDS, parse_retry_after
from toolops.decisions.retry import Action, RetryPolicy, decide_retry

NOW = datetime(2026, 7, 19, 6, 0, 0, tzinfo=timezone.utc)


def test_it_takes_the_earlier_of_the_calls_own_deadline_and_the_runs_wall_clock():
    policy = TimeoutPolicy.from_dict({"deadline_seconds": 30})
    assert call_deadline(released_at=NOW, policy=policy, run_wall_end=None) == NOW + timedelta(seconds=30)
    assert call_deadline(released_at=NOW, policy=policy, run_wall_end=NOW + timedelta(seconds=5)) == NOW + timedelta(seconds=5)
    assert call_deadline(released_at=NOW, policy=policy, run_wall_end=NOW + timedelta(hours=1)) == NOW + timedelta(seconds=30)


def test_a_policy_without_deadline_seconds_still_has_a_deadline():
    assert TimeoutPolicy.from_dict({}).deadline_seconds == DEFAULT_DEADLINE_SECONDS
    assert TimeoutPolicy.from_dict(None).deadline_seconds == DEFAULT_DEADLINE_SECONDS


@pytest.mark.parametrize("policy", [
    {"deadline_seconds": 0}, {"deadline_seconds": -1}, {"deadline_seconds": "30"}, {"deadline_seconds": True},
    {"attempt_timeout_seconds": float("nan")}, {"deadline": 30}, [],
])
def test_it_refuses_a_bad_timeout_policy(policy):
    with pytest.raises(ValueError):
        TimeoutPolicy.from_dict(policy)


def test_unlimited_attempts_stop_at_the_deadline():
    """maximum_attempts: 0 is Temporal's "unlimited": the deadline, not the count, ends the retries."""
    policy = RetryPolicy(initial_interval=1, backoff_coefficient=2, maximum_interval=8, maximum_attempts=0)
    deadline = NOW + timedelta(seconds=60)
    decide = lambda attempt, now: decide_retry(failure_class="transient", side_effect_class="read_only", attempt=attempt,  # noqa: E731
                                               policy=policy, now=now, deadline=deadline, random=lambda: 0.999)
    assert decide(1000, NOW).action == Action.RETRY_AFTER  # a thousand attempts in: still retrying
    late = decide(1000, deadline - timedelta(seconds=1))
    assert (late.action, late.reason) == (Action.STOP, "deadline")


@pytest.mark.parametrize("value,expected", [
    ("120", 120.0),
    (" 7 ", 7.0),
    ("Sun, 19 Jul 2026 06:00:30 GMT", 30.0),        # IMF-fixdate
    ("Sunday, 19-Jul-26 06:01:00 GMT", 60.0),       # obsolete RFC 850 form
    ("Sun Jul 19 06:02:00 2026", None),             # asctime carries no zone: refused rather than guessed
    ("Sun, 19 Jul 2026 05:00:00 GMT", 0.0),         # in the past: retry now
    ("Sun, 19 Jul 2099 06:00:00 GMT", MAX_RETRY_AFTER_SECONDS),
    ("99999999999999999999", MAX_RETRY_AFTER_SECONDS),
    ("-5", None), ("1.5", None), ("1e9", None), ("", None), (None, None), ("soon", None), ("٣", None),
])
def test_it_reads_retry_after_as_seconds_or_an_http_date(value, expected):
    assert parse_retry_after(value, now=NOW) == expected


def test_a_retry_after_past_the_deadline_stops_the_retries():
    wait = parse_retry_after("Sun, 19 Jul 2026 06:10:00 GMT", now=NOW)
    decision = decide_retry(failure_class="rate_limited", side_effect_class="write_idempotent", attempt=1,
                            policy=RetryPolicy(), now=NOW, deadline=NOW + timedelta(seconds=60), retry_after_seconds=wait,
                            random=lambda: 0.5)
    assert (decision.action, decision.reason, decision.retry_after_seconds) == (Action.STOP, "deadline", 600.0)
