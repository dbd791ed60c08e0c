"""Outgoing webhooks: listens to what the domain announces (``invocations_app.signals``), writes the
outbox rows in the same transaction (``emit``) and sends them from the workers (``delivery``)."""
