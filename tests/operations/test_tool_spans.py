"""Exported spans carry OpenTelemetry's GenAI semantic conventions for tool execution
(``gen_ai.operation.name=execute_tool``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``) and, on a
failed call, ``error.type`` with the span's status ERROR — so a tool error does not look like a
healthy request in a tracing backend. The SDK's own in-memory exporter receives them.
"""
from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.builders import HERE, admit_proposal, make_calendar_spec, make_planner
from toolops import otel
from worker.attempt import execution_run
from worker.claim import execution_claim

pytestmark = pytest.mark.django_db


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    otel.configure(processor=SimpleSpanProcessor(exporter))
    yield exporter
    otel.reset()


def _run(title: str):
    spec = make_calendar_spec(confirm_seconds=None, retry_policy={"maximum_attempts": 1},
                              executor={"kind": "python", "callable": f"{HERE}.calendar_create"})
    invocation = admit_proposal(subject=make_planner(), spec=spec, arguments={"calendar_id": "primary", "title": title})
    claimed, attempt = execution_claim(invocation_id=invocation.pk)
    execution_run(invocation=claimed, attempt=attempt)
    return invocation


def _by_name(exporter) -> dict:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_a_successful_call_is_an_execute_tool_span_with_the_tool_and_the_model_call_id(spans):
    invocation = _run("planning")
    found = _by_name(spans)
    for name in ("toolops.attempt", "toolops.invocation"):
        span = found[name]
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == "calendar.create_event"
        assert span.attributes["gen_ai.tool.call.id"] == invocation.proposal.proposal_id == "call_1"
        assert "error.type" not in span.attributes
        assert span.status.status_code == StatusCode.OK


def test_a_failed_call_carries_error_type_and_an_error_status(spans):
    _run("reject this one")
    found = _by_name(spans)
    assert found["toolops.attempt"].attributes["error.type"] == "business_rejected"
    assert found["toolops.invocation"].attributes["error.type"] == "business_rejected"
    for name in ("toolops.attempt", "toolops.invocation"):
        assert found[name].status.status_code == StatusCode.ERROR
        assert found[name].attributes["gen_ai.operation.name"] == "execute_tool"
