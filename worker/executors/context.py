"""What an executor is told about the attempt it runs: ids, class, keys, the grants bounding egress,
the response limits and the deadline (built by ``worker.attempt.attempt_context``).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from toolops.model_io.tool_messages import DEFAULT_MAX_RESPONSE_BYTES

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptContext:
    invocation_id: str
    tool_ref: str
    side_effect_class: str
    attempt: int
    idempotency_key: str  # the runtime's key (python executors keep their own key space)
    traceparent: str
    timeout_seconds: float
    # What a remote sees instead of the runtime's key (derived per tenant; docs/concepts/execution.md).
    remote_key: str = ""
    # The grant snapshots the call was authorized with: their URL scopes bound every hop.
    egress_grants: tuple[Mapping, ...] = ()
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    oversize: str = "truncate"
    # time.monotonic() by which the attempt must be over (connect, send and the whole read).
    deadline: float | None = field(default=None, compare=False)
    # Admission checked the tool's gates (an imported tool's quarantine) moments ago in this
    # same thread (an inline read): the executor need not read them again.
    gates_checked_at_admission: bool = False
    # An imported tool's gate (``specs_app.upstream_reads.UpstreamGate``: quarantine, confirmed class)
    # as ``worker.attempt.attempt_context`` read it for this attempt; None for other tools.
    upstream_gate: Any = field(default=None, compare=False)

    def attempt_deadline(self) -> float:
        return self.deadline if self.deadline is not None else time.monotonic() + self.timeout_seconds


def int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
