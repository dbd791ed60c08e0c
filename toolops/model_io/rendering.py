"""ToolSpecs rendered as OpenAI / Anthropic / MCP tool definitions, and the exact name mapping.

A model sees one *model-facing name* per tool; the runtime thinks in ``name@version``. The
mapping between the two is a bijection (docs/concepts/lifecycle.md invariant 2: no fuzzy or "latest" matching):

    name@version                      model-facing name
    calendar.create_event@1    <->    calendar-create_event_v1

Forward: replace every ``.`` with ``-`` and append ``_v<version>``. Backward: split on the
*last* ``_v``, map ``-`` back to ``.``, then re-render and require byte equality. The inverse is
exact because tool names never contain ``-`` (so ``-`` can only come from a dot) and the version
is plain decimal digits (so the last ``_v`` is always the suffix we appended, even for names
like ``a_v1.b``). Names are case-sensitive: ``Calendar-…`` is a different tool.

The result uses only ``[A-Za-z0-9_-]`` and is capped at 64 characters, the strictest of the
three ecosystems (OpenAI/Anthropic ``^[a-zA-Z0-9_-]{1,64}$``; MCP 1-128 of ``[A-Za-z0-9_.-]``).

Stdlib only (plus the pure :mod:`toolops.runtime.strict_mode`): this module is shared by the
API, the worker and offline tooling.

``format=openai`` renders ``"strict": true`` when the input schema fits (or can be made to fit)
OpenAI's strict subset; :func:`rendering_metadata` says whether it did, why not, and which
``null`` values admission maps back to "absent" (see :mod:`toolops.runtime.strict_mode`).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Iterable

from toolops.runtime.strict_mode import strict_form

# \A … \Z rather than ^ … $: "$" also matches before a trailing newline, so a caller using
# .match() would otherwise accept "calendar.create_event\n".
TOOL_NAME_RE: re.Pattern[str] = re.compile(
    r"\A[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z][A-Za-z0-9_]*)*\Z"
)
# Explicit [0-9]: int() alone would also accept "+1", " 1", "1_0" and non-ASCII digits.
_VERSION_RE = re.compile(r"\A[1-9][0-9]*\Z")

FORMATS = ("openai", "anthropic", "mcp")
SIDE_EFFECT_CLASSES = ("read_only", "write_idempotent", "write_unsafe")

MODEL_FACING_MAX_LEN = 64  # OpenAI and Anthropic function names; MCP allows 128
_REF_SEP = "@"
_MF_VERSION_SEP = "_v"


class ToolNameError(ValueError):
    """A tool name, version, ``name@version`` or model-facing name that is not exactly valid."""

    code = "invalid_tool_name"


def validate_tool_name(name: str) -> None:
    """Raise ToolNameError unless ``name`` is a dotted identifier (``calendar.create_event``)."""
    if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
        raise ToolNameError(f"invalid tool name {name!r}: expected dotted identifiers")


def _validate_version(version: int) -> None:
    # bool is an int subclass; True must not silently become version 1.
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ToolNameError(f"invalid tool version {version!r}: expected a positive integer")


def _parse_version(text: str, whole: str) -> int:
    if not _VERSION_RE.match(text):
        raise ToolNameError(f"invalid version {text!r} in {whole!r}")
    try:
        return int(text)
    except ValueError as exc:  # beyond Python's int-from-str digit limit
        raise ToolNameError(f"invalid version {text!r} in {whole!r}") from exc


def tool_ref(name: str, version: int) -> str:
    """``name@version``, e.g. ``calendar.create_event@1``."""
    validate_tool_name(name)
    _validate_version(version)
    return f"{name}{_REF_SEP}{version}"


def parse_tool_ref(ref: str) -> tuple[str, int]:
    """Exact inverse of :func:`tool_ref`; anything it would not produce raises ToolNameError."""
    if not isinstance(ref, str):
        raise ToolNameError(f"invalid tool reference {ref!r}")
    name, sep, version_text = ref.partition(_REF_SEP)
    if not sep:
        raise ToolNameError(f"invalid tool reference {ref!r}: expected name@version")
    validate_tool_name(name)
    # partition() split at the first "@", so "x@1@2" leaves "1@2" here and fails the digit check.
    return name, _parse_version(version_text, ref)


def model_facing_name(name: str, version: int) -> str:
    """The one name shown to the model in every format, e.g. ``calendar-create_event_v1``.

    Raises ToolNameError when the result would exceed 64 characters, so an over-long name is
    refused when the ToolSpec is published rather than when a model call is made.
    """
    validate_tool_name(name)
    _validate_version(version)
    mf = f"{name.replace('.', '-')}{_MF_VERSION_SEP}{version}"
    if len(mf) > MODEL_FACING_MAX_LEN:
        raise ToolNameError(
            f"model-facing name {mf!r} is {len(mf)} characters; the limit is "
            f"{MODEL_FACING_MAX_LEN}: shorten the tool name"
        )
    return mf


def parse_model_facing_name(mf: str) -> tuple[str, int]:
    """Exact inverse of :func:`model_facing_name`; no case folding or near-name matching."""
    if not isinstance(mf, str):
        raise ToolNameError(f"invalid model-facing name {mf!r}")
    base, sep, version_text = mf.rpartition(_MF_VERSION_SEP)
    if not sep:
        raise ToolNameError(f"invalid model-facing name {mf!r}: expected <name>_v<version>")
    name = base.replace("-", ".")
    version = _parse_version(version_text, mf)
    try:
        rendered = model_facing_name(name, version)
    except ToolNameError as exc:
        raise ToolNameError(f"invalid model-facing name {mf!r}: {exc}") from exc
    # Re-render and compare: catches anything the split tolerated, e.g. a literal "." in mf.
    if rendered != mf:
        raise ToolNameError(f"invalid model-facing name {mf!r}")
    return name, version


@dataclass(frozen=True)
class RenderableTool:
    """The model-visible part of one published ToolSpec; validated on construction."""

    name: str
    version: int
    description: str
    input_schema: dict
    side_effect_class: str  # "read_only" | "write_idempotent" | "write_unsafe"
    title: str | None = None

    def __post_init__(self) -> None:
        model_facing_name(self.name, self.version)  # name, version and length in one go
        if self.side_effect_class not in SIDE_EFFECT_CLASSES:
            raise ValueError(
                f"unknown side_effect_class {self.side_effect_class!r}; "
                f"expected one of {', '.join(SIDE_EFFECT_CLASSES)}"
            )
        if not isinstance(self.description, str):
            raise ValueError("description must be a string")
        if self.title is not None and not isinstance(self.title, str):
            raise ValueError("title must be a string or None")
        # All three ecosystems take an object schema for arguments (OpenAI "parameters",
        # Anthropic "input_schema", MCP "inputSchema" are all {"type": "object", ...}).
        if not isinstance(self.input_schema, dict) or self.input_schema.get("type") != "object":
            raise ValueError('input_schema must be a JSON Schema object with "type": "object"')

    @property
    def ref(self) -> str:
        return tool_ref(self.name, self.version)

    @property
    def model_facing_name(self) -> str:
        return model_facing_name(self.name, self.version)


# (readOnlyHint, destructiveHint, idempotentHint); see mcp_annotations for the reasoning.
_ANNOTATIONS: dict[str, tuple[bool, bool, bool]] = {
    "read_only": (True, False, True),
    "write_idempotent": (False, False, True),
    "write_unsafe": (False, True, False),
}


def mcp_annotations(side_effect_class: str) -> dict[str, bool]:
    """MCP ``ToolAnnotations`` hints derived from the side-effect class.

    ==================  ============  ===============  ==============
    side_effect_class   readOnlyHint  destructiveHint  idempotentHint
    ==================  ============  ===============  ==============
    read_only           True          False            True
    write_idempotent    False         False            True
    write_unsafe        False         True             False
    ==================  ============  ===============  ==============

    ``write_idempotent`` tools take an idempotency key, so a repeat with the same key has no
    further effect (idempotent) and the call adds rather than destroys (not destructive).
    ``write_unsafe`` has no such guarantee, so it is flagged the conservative way. The MCP spec
    ignores the last two hints when ``readOnlyHint`` is true; we still set them explicitly.
    ``openWorldHint`` is always True (added by the renderer): tools reach external systems.
    """
    try:
        read_only, destructive, idempotent = _ANNOTATIONS[side_effect_class]
    except KeyError:
        raise ValueError(
            f"unknown side_effect_class {side_effect_class!r}; "
            f"expected one of {', '.join(SIDE_EFFECT_CLASSES)}"
        ) from None
    return {"readOnlyHint": read_only, "destructiveHint": destructive, "idempotentHint": idempotent}


def _render_openai(tool: RenderableTool) -> dict[str, Any]:
    # OpenAI does not want "$schema" in parameters. No extra keys either (it rejects unknown
    # ones): name@version travels in a separate name_map, strict-mode details in the metadata.
    form = strict_form(tool.input_schema)
    if form.strict:
        parameters = form.parameters
    else:
        parameters = {k: v for k, v in tool.input_schema.items() if k != "$schema"}
    return {
        "type": "function",
        "function": {
            "name": tool.model_facing_name,
            "description": tool.description,
            "parameters": copy.deepcopy(parameters),
            "strict": form.strict,
        },
    }


def _render_anthropic(tool: RenderableTool) -> dict[str, Any]:
    return {
        "name": tool.model_facing_name,
        "description": tool.description,
        "input_schema": copy.deepcopy(tool.input_schema),
    }


def _render_mcp(tool: RenderableTool) -> dict[str, Any]:
    # MCP 2025-06-18 Tool. The title is for humans, so it may carry the exact name@version.
    title = tool.title or tool.ref
    return {
        "name": tool.model_facing_name,
        "title": title,
        "description": tool.description,
        "inputSchema": copy.deepcopy(tool.input_schema),
        "annotations": {
            "title": title,
            **mcp_annotations(tool.side_effect_class),
            "openWorldHint": True,
        },
    }


_RENDERERS = {"openai": _render_openai, "anthropic": _render_anthropic, "mcp": _render_mcp}


def render_tool(tool: RenderableTool, fmt: str) -> dict:
    """One tool definition in ``fmt``.

    The description is passed through verbatim: the rendering is recorded as what the model
    saw, so nothing is added to it. Schemas are deep-copied so later edits to the returned
    dict cannot alter the source ToolSpec (or vice versa).
    """
    try:
        renderer = _RENDERERS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}") from None
    return renderer(tool)


def rendering_metadata(tool: RenderableTool, fmt: str) -> dict:
    """What a client should know about ``render_tool(tool, fmt)`` beyond the definition itself.

    For ``openai``: ``strict`` (as rendered), ``strict_reason`` (why not, else None) and
    ``null_as_absent`` (instance paths whose ``null`` admission treats as "absent"). Other
    formats have no strict mode: ``{}``.
    """
    if fmt not in _RENDERERS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return strict_form(tool.input_schema).metadata() if fmt == "openai" else {}


def null_as_absent_of(rendered: dict, input_schema: dict) -> tuple[str, ...]:
    """The null-means-absent paths admission applies to a call made with ``rendered``.

    Empty unless ``rendered`` is an OpenAI definition with ``strict: true``. The paths are
    recomputed from the (immutable) input schema and used only if that recomputation gives
    exactly the recorded parameters; otherwise (a rendering by other code) nothing is mapped,
    so a null stays a null and the schema refuses it: never a guess.
    """
    function = rendered.get("function") if isinstance(rendered, dict) else None
    if not isinstance(function, dict) or function.get("strict") is not True:
        return ()
    form = strict_form(input_schema)
    if not form.strict or form.parameters != function.get("parameters"):
        return ()
    return form.null_as_absent


def render_tools(tools: Iterable[RenderableTool], fmt: str) -> list[dict]:
    """Definitions in the order given. A tool listed twice is a caller bug: ValueError."""
    rendered: list[dict] = []
    seen: set[str] = set()
    for tool in tools:
        if tool.ref in seen:
            raise ValueError(f"tool {tool.ref} listed twice")
        seen.add(tool.ref)
        rendered.append(render_tool(tool, fmt))
    return rendered
