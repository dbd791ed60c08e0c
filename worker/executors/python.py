"""The ``python`` executor: an in-process callable named by its dotted path (the demo's tools).
"""
from __future__ import annotations

import importlib
import logging
from typing import Any

from toolops.decisions.execution import Commit, ExecutionOutcome, LookupOutcome
from worker.executors.context import AttemptContext

logger = logging.getLogger(__name__)


def _import(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def lookup_python(spec: str, arguments: Any, ctx: AttemptContext) -> LookupOutcome:
    return _import(spec)(arguments, ctx)


def execute_python(config: dict, arguments: Any, ctx: AttemptContext) -> ExecutionOutcome:
    result = _import(config["callable"])(arguments, ctx)
    if isinstance(result, ExecutionOutcome):
        return result
    commit = Commit.NOT_APPLICABLE if ctx.side_effect_class == "read_only" else Commit.COMMITTED
    return ExecutionOutcome(commit=commit, value=result)
