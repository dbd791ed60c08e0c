"""What the domain announces, for the channels outside it (docs/architecture.md).

The state kernel and the confirmation services send these inside the caller's transaction, where
it happens; a receiver (the outgoing webhooks connect theirs in ``webhooks/apps.py``) writes its
outbox rows in that same transaction, so a rolled-back decision announces nothing. The domain
imports no receiver: a new channel connects to these instead of being imported by the kernel.
"""
from django.dispatch import Signal

# Sent with ``confirmation=<Confirmation>``.
confirmation_requested = Signal()
confirmation_decided = Signal()
confirmation_expired = Signal()
confirmation_escalated = Signal()
# Sent with ``invocation=<Invocation>`` when it reaches a terminal state.
invocation_settled = Signal()
