"""Prometheus metrics (docs/how-to/operate.md): the official ``prometheus-client`` in multiprocess
mode, so every gunicorn worker's and Celery child's counts reach one scrape of the web's
``/metrics``. Each process writes its samples to memory-mapped files in
``PROMETHEUS_MULTIPROC_DIR`` (``TOOLOPS_METRICS_DIR``, settings.py); a scrape sums them.

Labels are bounded: a ToolSpec's name (never a name a model proposed that matches no ToolSpec),
a tenant's slug, an outcome or class from a fixed set — never an id, an argument or a path.
The domain records through the functions below at its seams (admission, the attempt's close,
the claim, signals); the pure core never imports this module. Gauges that are a count of rows
(pending confirmations, unknown outcomes, backlogs) are read from the database at scrape time
(``invocations_app.operations``) rather than kept in every process.
"""
from __future__ import annotations

import os
from datetime import datetime

from django.conf import settings

# Multiprocess mode is chosen when prometheus_client is first imported: settings.py sets the
# variable; this covers a process that imports the module before settings did.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(settings.TOOLOPS_METRICS_DIR))

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest  # noqa: E402
from prometheus_client.core import GaugeMetricFamily  # noqa: E402
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402

# Off in a benchmark's baseline round (bench/admission.py --metrics), on everywhere else.
ENABLED = settings.TOOLOPS_METRICS

# Seconds: a tool call lasts milliseconds to minutes; a person decides in seconds to days.
_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_DECISION_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400)

PROPOSALS = Counter("toolops_proposals", "Proposals admitted, by outcome of admission",
                    ["tool", "tenant", "outcome"])
DECISIONS = Counter("toolops_confirmation_decisions", "Confirmations decided (or expired), by outcome",
                    ["tool", "tenant", "outcome"])
DECISION_SECONDS = Histogram("toolops_confirmation_decision_seconds", "Time from a confirmation's request to its decision",
                             ["tool"], buckets=_DECISION_BUCKETS)
ATTEMPTS = Counter("toolops_attempts", "Attempts ended, by failure class ('none' when it succeeded) and side-effect class",
                   ["tool", "side_effect_class", "failure_class"])
ATTEMPT_SECONDS = Histogram("toolops_attempt_duration_seconds", "Duration of an attempt, claim to close",
                            ["tool"], buckets=_CALL_BUCKETS)
UNKNOWN_OUTCOMES = Counter("toolops_outcomes_unknown", "Calls that entered OUTCOME_UNKNOWN", ["tool", "tenant"])
QUEUE_LAG = Histogram("toolops_queue_lag_seconds", "From a call being ready to run to a worker claiming it",
                      buckets=_CALL_BUCKETS)
WEBHOOKS = Counter("toolops_webhook_deliveries", "Webhook delivery attempts, by resulting status", ["status"])
MCP_REQUESTS = Counter("toolops_mcp_requests", "MCP requests, by method and result", ["method", "result"])
HTTP_SECONDS = Histogram("toolops_http_request_duration_seconds", "Web requests, by route pattern and status class",
                         ["method", "route", "status"], buckets=_CALL_BUCKETS)

# Admission's end state → the outcome label.
_ADMISSION_OUTCOMES = {
    "PARSE_REJECTED": "parse_rejected", "VALIDATION_REJECTED": "validation_rejected",
    "AUTHORIZATION_REJECTED": "authorization_rejected",
}


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return max(0.0, (end - start).total_seconds()) if start and end else None


def proposal_admitted(*, tool: str, tenant: str, state: str, needs_person: bool) -> None:
    if ENABLED:
        outcome = "needs_person" if needs_person else _ADMISSION_OUTCOMES.get(state, "allowed")
        PROPOSALS.labels(tool or "unknown", tenant, outcome).inc()


def confirmation_decided(*, tool: str, tenant: str, outcome: str, requested_at: datetime, decided_at: datetime | None) -> None:
    if ENABLED:
        DECISIONS.labels(tool, tenant, outcome).inc()
        took = _seconds(requested_at, decided_at)
        if took is not None:
            DECISION_SECONDS.labels(tool).observe(took)


def attempt_ended(*, tool: str, side_effect_class: str, failure_class: str | None, started: datetime, ended: datetime) -> None:
    if ENABLED:
        ATTEMPTS.labels(tool, side_effect_class, failure_class or "none").inc()
        ATTEMPT_SECONDS.labels(tool).observe(_seconds(started, ended) or 0.0)


def outcome_unknown(*, tool: str, tenant: str) -> None:
    if ENABLED:
        UNKNOWN_OUTCOMES.labels(tool, tenant).inc()


def attempt_claimed(*, ready_at: datetime | None, claimed_at: datetime) -> None:
    lag = _seconds(ready_at, claimed_at)
    if ENABLED and lag is not None:
        QUEUE_LAG.observe(lag)


def webhook_delivery(*, status: str) -> None:
    if ENABLED:
        WEBHOOKS.labels(status).inc()


def mcp_request(*, method: str, result: str) -> None:
    if ENABLED:
        MCP_REQUESTS.labels(method, result).inc()


def http_request(*, method: str, route: str, status: int, seconds: float) -> None:
    if ENABLED:
        HTTP_SECONDS.labels(method, route, f"{status // 100}xx").observe(seconds)


class RowGauges:
    """A collector of gauges read at scrape time: ``read()`` returns
    ``{name: (help, label names, [(label values, value), …])}``."""

    def __init__(self, read):
        self.read = read

    def collect(self):
        for name, (help_text, labels, samples) in self.read().items():
            family = GaugeMetricFamily(name, help_text, labels=labels)
            for values, value in samples:
                family.add_metric(values, value)
            yield family


def exposition(read_gauges=None) -> bytes:
    """The text a scrape gets: every process's counters and histograms, plus the row gauges."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    if read_gauges is not None:
        registry.register(RowGauges(read_gauges))
    return generate_latest(registry)
