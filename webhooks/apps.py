from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    """Outgoing webhooks: listen to what the domain announces (``invocations_app.signals``) and
    write the outbox rows in the same transaction (``emit.py``); workers send them (``delivery.py``)."""

    name = "webhooks"
    verbose_name = "Outgoing webhooks"

    def ready(self) -> None:
        from invocations_app import signals
        from webhooks import emit

        for signal, emitter in (
            (signals.confirmation_requested, emit.webhook_confirmation_requested),
            (signals.confirmation_decided, emit.webhook_confirmation_decided),
            (signals.confirmation_expired, emit.webhook_confirmation_expired),
            (signals.confirmation_escalated, emit.webhook_confirmation_escalated),
        ):
            signal.connect(_on_confirmation(emitter), weak=False, dispatch_uid=f"webhooks.{emitter.__name__}")
        signals.invocation_settled.connect(_on_settled, weak=False, dispatch_uid="webhooks.invocation_settled")


def _on_confirmation(emitter):
    def receiver(sender, confirmation, **kwargs) -> None:
        emitter(confirmation)
    return receiver


def _on_settled(sender, invocation, **kwargs) -> None:
    from webhooks.emit import webhook_invocation_settled
    webhook_invocation_settled(invocation)
