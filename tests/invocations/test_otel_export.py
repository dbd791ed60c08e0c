"""Optional OTLP export: spans with ToolOps' own trace/span ids reach a real OTLP/HTTP receiver."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from invocations_app import admission, runs
from worker.attempt import execution_run
from worker.claim import execution_claim
from devtools.demo import DEMO_TOOLSPECS
from specs_app.models import ToolSpec
from specs_app.services import toolspec_publish
from tests.builders import make_grant, make_subject
from toolops import otel
from toolops.runtime.tracecontext import parse_traceparent

WEATHER = next(s for s in DEMO_TOOLSPECS if s["name"] == "weather.get_forecast")


@pytest.fixture
def receiver(monkeypatch):
    """A real OTLP/HTTP endpoint on loopback that keeps every span it is sent."""
    spans = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server naming
            request = ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    spans.extend(scope_spans.spans)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    otel.configure(processor=SimpleSpanProcessor(OTLPSpanExporter()))  # synchronous, for the test
    yield spans
    otel.reset()
    server.shutdown()


def test_it_is_off_without_the_standard_variables(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert otel.enabled() is False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert otel.enabled() is False


@pytest.mark.django_db
def test_it_exports_proposal_invocation_and_attempt_spans_with_our_ids(receiver, django_capture_on_commit_callbacks):
    subject = make_subject()
    spec = toolspec_publish(spec=ToolSpec.objects.create(**{**WEATHER, "version": 1}))
    make_grant(subject=subject)
    caller = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    run = runs.run_create(subject=subject, budgets={}, timezone_name="UTC", locale="en-US", metadata={}, trace=caller)
    call = runs.model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])
    with django_capture_on_commit_callbacks(execute=True):
        inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="c1", name=spec.ref,
                                         arguments_bytes=b'{"city": "Oslo", "date": "2026-07-20"}', trace=caller)
    invocation, attempt = execution_claim(invocation_id=inv.pk)
    execution_run(invocation=invocation, attempt=attempt)
    by_name = {s.name: s for s in receiver}
    assert set(by_name) == {"toolops.proposal", "toolops.invocation", "toolops.attempt"}
    assert {s.trace_id.hex() for s in receiver} == {caller.trace_id}
    assert by_name["toolops.proposal"].span_id.hex() == inv.proposal.span_id
    assert by_name["toolops.proposal"].parent_span_id.hex() == caller.parent_span_id
    assert by_name["toolops.invocation"].span_id.hex() == inv.span_id
    assert by_name["toolops.attempt"].span_id.hex() == attempt.span_id
    assert by_name["toolops.attempt"].parent_span_id.hex() == inv.span_id
