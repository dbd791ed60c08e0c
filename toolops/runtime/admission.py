"""The admission pipeline of docs/concepts/admission.md–4 as a pure function: bytes in, a plan of transitions out.

``admit`` never touches a database. It parses, validates, normalizes and digests, and returns
the ordered state transitions the service must record (PROPOSED → PARSED → VALIDATED, or the
rejection that stopped it) with everything each layer produced, so the record can answer
"what did the parser, validator and normalizer say, under which versions and context".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolops.runtime.digest import CanonicalizationError, invocation_digest
from toolops.runtime.normalizers import NormalizationContext, NormalizationRejected, cached_rules, normalize_arguments
from toolops.runtime.parser import DEFAULT_LIMITS, ParseRejected, ParserLimits, parse_strict
from toolops.runtime.states import State
from toolops.runtime.strict_mode import null_to_absent
from toolops.runtime.validation import cached_validator


@dataclass(frozen=True)
class ToolView:
    """What admission needs to know about one published ToolSpec version."""

    name: str
    version: int
    input_schema: dict
    schema_dialect: str | None
    format_assertion: bool
    normalizers: list[dict]
    # Set when the model saw an OpenAI strict rendering that made optional properties nullable:
    # a null at one of these instance paths means "absent" (strict_mode.null_to_absent).
    null_as_absent: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Step:
    to_state: State
    kind: str
    data: dict = field(default_factory=dict)


@dataclass
class AdmissionPlan:
    steps: list[Step] = field(default_factory=list)
    parsed: Any = None
    validation: dict = field(default_factory=dict)
    normalized_arguments: Any = None
    normalization_trace: list = field(default_factory=list)
    digest: str = ""
    error: dict | None = None

    @property
    def final_state(self) -> State:
        return self.steps[-1].to_state if self.steps else State.PROPOSED

    def reject(self, to_state: State, kind: str, *, code: str, message: str, detail: dict) -> "AdmissionPlan":
        self.error = {"code": code, "message": message, "detail": detail}
        self.steps.append(Step(to_state, kind, {"error": self.error}))
        return self


def admit(
    *,
    arguments_bytes: bytes,
    tool: ToolView | None,
    visible_names: list[str],
    tenant: str,
    context: NormalizationContext,
    limits: ParserLimits = DEFAULT_LIMITS,
) -> AdmissionPlan:
    """Run parse → lookup → schema → normalization → digest and return the plan.

    ``tool`` is None when the proposed name is not in the model call's visible set; that is a
    VALIDATION_REJECTED with ``unknown_tool`` listing ``visible_names`` — and the bytes are still
    parsed first so the record shows what the model sent.
    """
    plan = AdmissionPlan()
    try:
        plan.parsed = parse_strict(arguments_bytes, limits)
    except ParseRejected as exc:
        return plan.reject(
            State.PARSE_REJECTED, "parse_rejected", code="parse_rejected", message=exc.message, detail=exc.as_dict()
        )
    plan.steps.append(Step(State.PARSED, "parsed", {"type": type(plan.parsed).__name__}))

    if _contains_nul(plan.parsed):
        # Valid JSON, but U+0000 is refused before anything stores or forwards it: C-string
        # APIs truncate at it and PostgreSQL's jsonb cannot hold it.
        return plan.reject(
            State.VALIDATION_REJECTED, "validation_rejected", code="validation_rejected",
            message="a string or member name contains U+0000, which ToolOps never forwards to a tool",
            detail={"layer": "semantic", "reason": "nul_character"},
        )

    if tool is None:
        return plan.reject(
            State.VALIDATION_REJECTED,
            "unknown_tool",
            code="unknown_tool",
            message="the proposed tool is not in this model call's visible set",
            detail={"visible": sorted(visible_names)},
        )
    return _validate_and_normalize(plan, tool=tool, tenant=tenant, context=context)


def _validate_and_normalize(plan: AdmissionPlan, *, tool: ToolView, tenant: str, context: NormalizationContext) -> AdmissionPlan:
    validator = cached_validator(
        (tool.name, tool.version), tool.input_schema, dialect=tool.schema_dialect, format_assertion=tool.format_assertion
    )
    arguments = plan.parsed
    strict_mapping = None
    if tool.null_as_absent:
        # Before validation: the ToolSpec's own schema judges what the strict null stood for.
        arguments, removed = null_to_absent(plan.parsed, tool.null_as_absent)
        strict_mapping = {"null_as_absent": list(tool.null_as_absent), "removed": removed}
    issues = validator.validate(arguments)
    plan.validation = {"schema": {**validator.record(), "valid": not issues, "issues": [i.as_dict() for i in issues]}}
    if strict_mapping is not None:
        plan.validation["strict_rendering"] = strict_mapping
    if issues:
        return plan.reject(
            State.VALIDATION_REJECTED,
            "validation_rejected",
            code="validation_rejected",
            message=f"{len(issues)} schema error(s); first: {issues[0].pointer or '/'}: {issues[0].message}",
            detail={"layer": "schema", "issues": plan.validation["schema"]["issues"]},
        )

    semantic = {"normalizers_version": context.to_record().get("normalizers_version"), "rules": tool.normalizers}
    try:
        rules = cached_rules((tool.name, tool.version), tool.normalizers)
        plan.normalized_arguments, plan.normalization_trace = normalize_arguments(arguments, rules, context)
    except NormalizationRejected as exc:
        plan.validation["semantic"] = {**semantic, "valid": False, "error": exc.as_dict()}
        return plan.reject(
            State.VALIDATION_REJECTED,
            "normalization_rejected",
            code="normalization_rejected",
            message=exc.as_dict()["message"],
            detail={"layer": "semantic", **exc.as_dict()},
        )
    plan.validation["semantic"] = {**semantic, "valid": True}

    try:
        plan.digest = invocation_digest(tenant=tenant, tool_ref=tool.ref, normalized_arguments=plan.normalized_arguments)
    except CanonicalizationError as exc:
        return plan.reject(
            State.VALIDATION_REJECTED,
            "validation_rejected",
            code="validation_rejected",
            message=f"arguments cannot be canonicalized (RFC 8785): {exc}",
            detail={"layer": "digest"},
        )
    plan.steps.append(Step(State.VALIDATED, "validated", {"digest": plan.digest}))
    return plan


def _contains_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            if any("\x00" in key for key in item):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
