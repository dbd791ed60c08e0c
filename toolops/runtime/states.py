"""The invocation state machine (docs/concepts/lifecycle.md), as data.

Every write of ``Invocation.state`` is checked against ``TRANSITIONS`` twice: by the
transition service before it issues the conditional UPDATE, and by a database trigger
generated from this same table (see ``invocations_app`` migrations), so an edge that is not
here cannot be written by any code path.
"""
from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    PROPOSED = "PROPOSED"
    PARSED = "PARSED"
    VALIDATED = "VALIDATED"
    AUTHORIZED = "AUTHORIZED"
    PREPARED = "PREPARED"
    EXECUTING = "EXECUTING"
    COMMITTED = "COMMITTED"
    OBSERVED = "OBSERVED"
    PARSE_REJECTED = "PARSE_REJECTED"
    VALIDATION_REJECTED = "VALIDATION_REJECTED"
    AUTHORIZATION_REJECTED = "AUTHORIZATION_REJECTED"
    CANCELLED_BEFORE_COMMIT = "CANCELLED_BEFORE_COMMIT"
    FAILED_BEFORE_COMMIT = "FAILED_BEFORE_COMMIT"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    FAILED_AFTER_COMMIT = "FAILED_AFTER_COMMIT"


S = State

TRANSITIONS: dict[State, frozenset[State]] = {
    S.PROPOSED: frozenset({S.PARSED, S.PARSE_REJECTED}),
    S.PARSED: frozenset({S.VALIDATED, S.VALIDATION_REJECTED}),
    S.VALIDATED: frozenset({S.AUTHORIZED, S.AUTHORIZATION_REJECTED}),
    S.AUTHORIZED: frozenset(
        {S.PREPARED, S.EXECUTING, S.AUTHORIZATION_REJECTED, S.CANCELLED_BEFORE_COMMIT}
    ),
    S.PREPARED: frozenset({S.EXECUTING, S.CANCELLED_BEFORE_COMMIT}),
    S.EXECUTING: frozenset({S.COMMITTED, S.OBSERVED, S.FAILED_BEFORE_COMMIT, S.OUTCOME_UNKNOWN}),
    S.OUTCOME_UNKNOWN: frozenset({S.COMMITTED, S.FAILED_BEFORE_COMMIT, S.EXECUTING}),
    S.COMMITTED: frozenset({S.OBSERVED, S.FAILED_AFTER_COMMIT}),
    S.OBSERVED: frozenset(),
    S.PARSE_REJECTED: frozenset(),
    S.VALIDATION_REJECTED: frozenset(),
    S.AUTHORIZATION_REJECTED: frozenset(),
    S.CANCELLED_BEFORE_COMMIT: frozenset(),
    S.FAILED_BEFORE_COMMIT: frozenset(),
    S.FAILED_AFTER_COMMIT: frozenset(),
}

# States with no way out. OUTCOME_UNKNOWN is *not* terminal: reconciliation moves it on.
TERMINAL: frozenset[State] = frozenset(s for s, targets in TRANSITIONS.items() if not targets)

# The effect may exist from here on; nothing may turn these into "did not happen" (docs/concepts/lifecycle.md inv. 5).
AT_OR_AFTER_COMMIT: frozenset[State] = frozenset({S.COMMITTED, S.OBSERVED, S.FAILED_AFTER_COMMIT})

# Where an invocation can be born: where admission stops — a rejection, VALIDATED (recorded
# before authorization, e.g. an approver's edit), or where authorization leads (AUTHORIZED, maybe
# awaiting a human; PREPARED for a write). Every later state is reached by transitions only, and
# a database trigger refuses an INSERT in any other state (toolops/db_guards.py).
BIRTH_STATES: frozenset[State] = frozenset({
    S.PARSE_REJECTED, S.VALIDATION_REJECTED, S.VALIDATED, S.AUTHORIZATION_REJECTED, S.AUTHORIZED, S.PREPARED,
})

# Cancel is honoured only before the commit boundary (docs/concepts/lifecycle.md).
CANCELLABLE: frozenset[State] = frozenset(
    s for s, targets in TRANSITIONS.items() if S.CANCELLED_BEFORE_COMMIT in targets
)

ALL_EDGES: frozenset[tuple[State, State]] = frozenset(
    (src, dst) for src, targets in TRANSITIONS.items() for dst in targets
)


def is_allowed(src: str, dst: str) -> bool:
    """True when docs/concepts/lifecycle.md allows ``src → dst``; unknown state names are never allowed."""
    try:
        return State(dst) in TRANSITIONS[State(src)]
    except ValueError:
        return False


class TransitionNotAllowed(Exception):
    """An edge that is not in the table was asked for."""

    code = "transition_not_allowed"

    def __init__(self, src: str, dst: str):
        super().__init__(f"{src} → {dst} is not an edge of the invocation state machine")
        self.src, self.dst = src, dst
