"""Imports flow one way: the first-party import graph has no cycle.

The graph is built from the source with ``ast`` — every ``import`` and ``from … import``,
including those placed inside functions, so a cycle cannot hide behind a late import.
An edge goes from a module to each first-party module it names (``from pkg import mod`` names
``pkg.mod`` when that is a module, else ``pkg``). Package ``__init__`` modules count like any
other module.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import DOMAIN_PACKAGES, PROJECT_PACKAGES, ROOM_PACKAGES

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (*PROJECT_PACKAGES, "demo_services", "bench")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if "migrations" in parts:
                continue  # generated; they import models and db_guards, nothing imports them
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _resolve(module: str, level: int, name: str | None, is_package: bool) -> str:
    if level == 0:
        return name or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node.level, node.module, is_package)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for target in targets:
                # ``import a.b.c`` names a.b.c; the nearest first-party module is the edge.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None — iterative DFS with colours."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        colour[start] = GREY
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = BLACK
                stack.pop()
            elif colour[child] == GREY:
                path = [n for n, _ in stack]
                return path[path.index(child):] + [child]
            elif colour[child] == WHITE:
                colour[child] = GREY
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_it_finds_the_modules_and_their_edges():
    graph = import_graph()
    # Sanity: the walk sees the packages and an import known to exist, so "no cycle" means something.
    assert "invocations_app.models" in graph and "toolops.runtime.states" in graph
    assert "toolops.runtime.states" in graph["toolops.db_guards"]


def test_it_detects_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_it_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# --- the rooms (docs/architecture.md) -----------------------------------------------------------

def _package_of(module: str, modules: dict[str, Path]) -> str:
    path = modules[module]
    return ".".join(path.resolve().relative_to(ROOT).parent.parts)


def _may_import_rooms(module: str) -> bool:
    """The composition root (settings, URLs), the admin and management commands wire rooms in."""
    return (module in ("toolops.settings", "toolops.urls") or module.endswith(".admin")
            or ".management.commands." in module)


def test_the_domain_imports_no_front_door_no_worker_and_no_webhook_channel():
    graph = import_graph()
    wrong = sorted(f"{module} -> {target}" for module, targets in graph.items()
                   if module.split(".")[0] in ("toolops", *DOMAIN_PACKAGES) and not _may_import_rooms(module)
                   for target in targets if target.split(".")[0] in ROOM_PACKAGES)
    assert not wrong, "the domain imports a room:\n" + "\n".join(wrong)


def test_the_rule_sees_a_domain_module_importing_a_room():
    graph = import_graph()
    assert any(t.startswith("webhooks.") for t in graph["invocations_app.admin"])  # allowed, and seen


def longest_chain(graph: dict[str, set[str]], members: set[str]) -> list[str]:
    """The longest import chain (modules) that stays inside ``members``; the graph has no cycle."""
    memo: dict[str, list[str]] = {}

    def from_(module: str) -> list[str]:
        if module not in memo:
            memo[module] = [module] + max((from_(t) for t in graph[module] if t in members), key=len, default=[])
        return memo[module]
    return max((from_(m) for m in members), key=len, default=[])


def test_no_import_chain_inside_a_package_is_longer_than_8_modules():
    graph, modules = import_graph(), _modules()
    packages: dict[str, set[str]] = {}
    for module in graph:
        if module.split(".")[0] in PROJECT_PACKAGES:
            packages.setdefault(_package_of(module, modules), set()).add(module)
    long = {package: " > ".join(chain) for package, members in packages.items()
            if len(chain := longest_chain(graph, members)) > 8}
    assert not long, long


def test_the_chain_measure_counts_modules():
    assert longest_chain({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}, {"a", "b", "c", "d"}) == ["d", "a", "b", "c"]
    assert longest_chain({"a": {"b"}, "b": {"c"}, "c": set()}, {"a", "b"}) == ["a", "b"]


def test_no_package_holds_more_than_5000_lines():
    sizes: dict[str, int] = {}
    modules = _modules()
    for module, path in modules.items():
        if module.split(".")[0] in PROJECT_PACKAGES:
            package = _package_of(module, modules)
            sizes[package] = sizes.get(package, 0) + len(path.read_text().splitlines())
    assert sizes["invocations_app"] > 1000  # the walk sees them
    assert not {p: n for p, n in sizes.items() if n > 5000}, sizes


def test_only_the_sql_adapter_reaches_below_the_orm():
    """Hand-built SQL and Django's private model API live in toolops/sql.py (and migrations)."""
    private = re.compile(r"_meta\.|connection\.ops|\.ops\.quote_name|get_col\(")
    found = [f"{path.relative_to(ROOT)}:{n}" for package in (*PROJECT_PACKAGES, "demo_services", "bench")
             for path in sorted((ROOT / package).rglob("*.py"))
             if "migrations" not in path.parts and path != ROOT / "toolops" / "sql.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if private.search(line)]
    assert not found, found
