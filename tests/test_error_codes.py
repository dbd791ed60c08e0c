"""Every error code ToolOps raises is in ``toolops.error_codes`` and in the OpenAPI schema (issue 13
item 9): the source is scanned, so the lists can't drift. The error-codes page of the docs is
generated from the same module (tests/test_docs_reference.py).

The scan reads every first-party module with ``ast`` and collects string constants in the places
a code is written: ``code=`` / ``deny_code=`` / ``error_code=`` keywords, ``"code"`` /
``"error_code"`` dict entries, ``code = …`` class attributes (tuple assignments too), both
branches of a conditional there, module constants named there (``EgressRefused(OUT_OF_SCOPE, …)``),
the first string passed to a ``…Refused`` / ``_refused`` / ``problem_response`` call (outside the
console, whose ``_refused`` names the action refused), the first
string of a tuple returned by a ``…refusal…`` function, and the values of ``…_CODES`` tables.
Failure classes are codes too (an execution failure names its class).
"""
from __future__ import annotations

import ast
import json
import pathlib
import re

import pytest

from tests.conftest import PROJECT_PACKAGES
from toolops import error_codes
from toolops.decisions.execution import KNOWN_KINDS

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = PROJECT_PACKAGES
CODE_KEYWORDS = {"code", "deny_code", "error_code", "default_code"}
CODE_CALLS = re.compile(r"(Refused|_refused|problem_response|problem)$")


def _modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path, ast.parse(path.read_text(encoding="utf-8"))


def _constants(trees) -> dict[str, str]:
    names = {}
    for _, tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        names[target.id] = node.value.value
    return names


def _strings(node, names) -> list[str]:
    """The code(s) an expression can evaluate to: a constant, a module constant, or either branch."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name) and node.id in names:
        return [names[node.id]]
    if isinstance(node, ast.IfExp):
        return _strings(node.body, names) + _strings(node.orelse, names)
    return []


def _func_name(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")


def raised_codes() -> dict[str, set[str]]:
    """code → the modules it is written in."""
    trees = list(_modules())
    names = _constants(trees)
    found: dict[str, set[str]] = {}

    def add(codes, path):
        for code in codes:
            if re.fullmatch(r"[a-z][a-z0-9_]*", code):
                found.setdefault(code, set()).add(str(path.relative_to(ROOT)))

    for path, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg in CODE_KEYWORDS:
                add(_strings(node.value, names), path)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and key.value in ("code", "error_code"):
                        add(_strings(value, names), path)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    pairs = [(target, node.value)] if isinstance(target, ast.Name) else (
                        list(zip(target.elts, node.value.elts))
                        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) else [])
                    for name, value in pairs:
                        if isinstance(name, ast.Name) and name.id in CODE_KEYWORDS:
                            add(_strings(value, names), path)
                    if isinstance(target, ast.Name) and target.id.endswith("_CODES") and isinstance(node.value, ast.Dict):
                        add([s for v in node.value.values for s in _strings(v, names)], path)
            elif isinstance(node, ast.Call) and CODE_CALLS.search(_func_name(node)) and path.relative_to(ROOT).parts[0] != "control":
                # (the console's ``_refused(request, obj, "approved", exc)`` names an action, not a code)
                first = next((s for arg in node.args for s in _strings(arg, names)), None)
                add([first] if first else [], path)
            elif isinstance(node, ast.FunctionDef) and "refusal" in node.name:
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple) and ret.value.elts:
                        add(_strings(ret.value.elts[0], names), path)
    add(KNOWN_KINDS - {"ok"}, ROOT / "toolops/decisions/execution.py")
    return found


def test_it_finds_the_codes_the_brief_names_so_the_scan_itself_works():
    found = raised_codes()
    for code in ("unknown_context", "too_many_tool_calls", "tool_quarantined", "service_unavailable", "rate_limited",
                 "digest_mismatch", "egress_out_of_scope", "not_cancellable", "budget_exhausted", "unauthenticated"):
        assert code in found, code


def test_every_code_raised_is_registered_with_its_meaning_and_action():
    found = raised_codes()
    missing = {code: sorted(where) for code, where in found.items()
               if code not in error_codes.all_codes() and code not in error_codes.NOT_EMITTED}
    assert not missing, f"codes raised but not in toolops/error_codes.py: {missing}"
    stale = sorted(set(error_codes.NOT_EMITTED) - set(found))
    assert not stale, f"NOT_EMITTED names codes the source no longer raises: {stale}"
    for table in (error_codes.HTTP, error_codes.INVOCATION, error_codes.CONSOLE):
        assert all(c.meaning and c.action for c in table.values())


def test_the_interim_messages_are_registered():
    from invocations_app.tool_messages import INTERIM

    assert {str(kind) for kind in INTERIM} <= set(error_codes.INVOCATION)


@pytest.fixture(scope="module")
def schema() -> dict:
    from drf_spectacular.generators import SchemaGenerator

    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))


def _operation_codes(schema: dict) -> dict[str, set[str]]:
    codes: dict[str, set[str]] = {}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for status, response in operation.get("responses", {}).items():
                problem = response.get("content", {}).get("application/problem+json")
                if problem:
                    narrowed = problem["schema"]["allOf"][1]["properties"]["code"]["enum"]
                    codes[f"{method.upper()} {path} {status}"] = set(narrowed)
    return codes


def test_the_openapi_schema_lists_every_code(schema):
    components = schema["components"]["schemas"]
    assert set(components["ProblemCode"]["enum"]) == set(error_codes.HTTP)
    assert set(components["InvocationErrorCodeEnum"]["enum"]) == set(error_codes.INVOCATION)
    assert set(components["ConsoleErrorCode"]["enum"]) == set(error_codes.CONSOLE)
    per_operation = _operation_codes(schema)
    assert per_operation, "no operation documents its problem codes"
    for where, codes in per_operation.items():
        status = int(where.rsplit(" ", 1)[1])
        assert all(error_codes.HTTP[c].status == status for c in codes), where
    # Codes an operation can answer are on that operation; the rest are path-wide (405 on any
    # path) or internal races, listed in the ProblemCode component only.
    on_some_operation = set().union(*per_operation.values())
    assert set(error_codes.HTTP) - on_some_operation == {"method_not_allowed"}


@pytest.mark.parametrize("operation, status, code", [
    ("POST /api/v1/runs/{run_id}/model-calls", "400", "unknown_context"),
    ("POST /api/v1/model-calls/{model_call_id}/proposals", "413", "too_many_tool_calls"),
    ("POST /api/v1/model-calls/{model_call_id}/proposals", "409", "idempotency_key_in_use"),
    ("GET /api/v1/invocations/{invocation_id}/binary", "410", "result_expired"),
    ("GET /api/v1/tools", "503", "service_unavailable"),
    ("GET /api/v1/tools", "429", "rate_limited"),
])
def test_an_operation_lists_the_codes_it_raises(schema, operation, status, code):
    assert code in _operation_codes(schema)[f"{operation} {status}"]


def test_a_code_is_registered_once_even_when_two_surfaces_show_it():
    """The Approvals API and the console refuse a person's decision with the same codes: each is one
    ``DECISIONS`` entry (same status, meaning and action) listed in both tables, never two definitions
    that drift apart; and only those are shared between the people's tables."""
    shared = set(error_codes.HTTP) & set(error_codes.CONSOLE)
    assert shared == {c.code for c in error_codes.DECISIONS}
    for code in ("duplicate_approver", "separation_of_duties"):
        assert error_codes.HTTP[code] is error_codes.CONSOLE[code]
    assert all(error_codes.HTTP[c] is error_codes.CONSOLE[c] for c in shared)
    source = (ROOT / "toolops" / "error_codes.py").read_text(encoding="utf-8")
    written = re.findall(r'ErrorCode\("([a-z0-9_]+)"', source)
    tables = {"HTTP": error_codes.HTTP, "INVOCATION": error_codes.INVOCATION, "CONSOLE": error_codes.CONSOLE}
    # A code written twice in the module must be two different events on two different surfaces.
    for code in {c for c in written if written.count(c) > 1}:
        assert code in error_codes.HTTP and code in error_codes.INVOCATION and code not in error_codes.CONSOLE, (
            code, [name for name, table in tables.items() if code in table])
