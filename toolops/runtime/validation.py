"""Structural validation of tool arguments (SPEC §3, layer 2): JSON Schema bound to a dialect.

Pure Python on top of ``jsonschema`` + ``referencing``. Two moments matter:

* **publish time** — :func:`check_schema` refuses a ToolSpec schema whose dialect is not
  supported, which is not valid against its meta-schema, or whose ``$ref`` cannot be resolved
  offline. :class:`SchemaRefused` is raised here and nowhere else.
* **call time** — :func:`cached_validator` hands out a compiled validator per published
  ``(name, version)``; :meth:`CompiledValidator.validate` returns every issue, never raises.

Nothing here touches the network: every ``$ref`` resolves against :data:`OFFLINE_REGISTRY`
(the official meta-schemas) or a registry built from it by :func:`offline_registry_with`.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from importlib.metadata import version as _dist_version
from typing import Any

import jsonschema_specifications
from jsonschema import Draft7Validator, Draft201909Validator, Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import specification_with

DIALECT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
DIALECT_2019_09 = "https://json-schema.org/draft/2019-09/schema"
DIALECT_DRAFT_07 = "http://json-schema.org/draft-07/schema#"

# Canonical URI per validator class: what resolve_dialect returns and what gets recorded.
_CANONICAL: dict[type, str] = {
    Draft202012Validator: DIALECT_2020_12,
    Draft201909Validator: DIALECT_2019_09,
    Draft7Validator: DIALECT_DRAFT_07,
}

SUPPORTED_DIALECTS: dict[str, type] = {}
for _cls, _uri in _CANONICAL.items():
    # Both spellings occur in the wild; the trailing empty fragment means nothing.
    SUPPORTED_DIALECTS[_uri.rstrip("#")] = _cls
    SUPPORTED_DIALECTS[_uri.rstrip("#") + "#"] = _cls

VALIDATOR_NAME = "jsonschema"
VALIDATOR_VERSION = _dist_version("jsonschema")

# How many custom meta-schemas may be chained before we give up (guards against cycles).
_MAX_METASCHEMA_HOPS = 8


class SchemaRefused(Exception):
    """A ToolSpec schema that cannot be published. Raised at publish time, never at call time."""

    code = "schema_refused"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ValidationIssue:
    """One failed keyword: where in the instance, which keyword, where in the schema."""

    pointer: str
    keyword: str
    message: str
    schema_pointer: str

    def as_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- registry


def _refuse_retrieval(uri: str) -> Resource:
    """Registry ``retrieve`` hook: an unknown URI is never fetched, only reported missing."""
    raise NoSuchResource(ref=uri)


# The official meta-schemas of every draft, bundled by jsonschema_specifications. Crawled once
# here so lookups by $id or $anchor do not re-crawl on every validator.
OFFLINE_REGISTRY: Registry = (
    Registry(retrieve=_refuse_retrieval).combine(jsonschema_specifications.REGISTRY).crawl()
)


def offline_registry_with(
    resources: Mapping[str, Any], *, dialect: str = DIALECT_2020_12
) -> Registry:
    """:data:`OFFLINE_REGISTRY` plus ``{uri: schema}`` documents (still never fetches).

    ``dialect`` is the specification assumed for documents without their own ``$schema``.
    Values may also be ready-made :class:`referencing.Resource` objects.
    """
    spec = specification_with(dialect)
    pairs = [
        (uri, doc if isinstance(doc, Resource) else Resource.from_contents(doc, spec))
        for uri, doc in resources.items()
    ]
    return OFFLINE_REGISTRY.with_resources(pairs).crawl()


# --------------------------------------------------------------------------- dialects


def _supported(uri: Any) -> str | None:
    cls = SUPPORTED_DIALECTS.get(uri) if isinstance(uri, str) else None
    return _CANONICAL[cls] if cls is not None else None


def _dialect_of_metaschema(uri: Any, registry: Registry) -> str:
    """Follow a ``$schema`` through offline custom meta-schemas down to a supported dialect."""
    seen: set[str] = set()
    while len(seen) < _MAX_METASCHEMA_HOPS:
        found = _supported(uri)
        if found:
            return found
        if not isinstance(uri, str) or uri in seen:
            break
        seen.add(uri)
        try:
            meta = registry.resolver().lookup(uri).contents
        except Unresolvable:
            break
        uri = meta.get("$schema") if isinstance(meta, Mapping) else None
    raise SchemaRefused("unsupported_dialect", f"$schema {uri!r} is not a supported dialect")


def resolve_dialect(
    schema: dict, declared: str | None, *, registry: Registry | None = None
) -> str:
    """The canonical dialect URI ``schema`` is bound to.

    The schema's own ``$schema`` wins; a custom meta-schema is accepted only if it is present
    in ``registry`` (offline) and itself built on a supported dialect. Otherwise ``declared``
    (the ToolSpec's ``schema_dialect``), otherwise 2020-12.
    """
    if isinstance(schema, Mapping) and "$schema" in schema:
        return _dialect_of_metaschema(
            schema["$schema"], OFFLINE_REGISTRY if registry is None else registry
        )
    if declared is None:
        return DIALECT_2020_12
    found = _supported(declared)
    if not found:
        raise SchemaRefused("unsupported_dialect", f"dialect {declared!r} is not supported")
    return found


# --------------------------------------------------------------------------- publish time

_META_VALIDATORS: dict[type, Any] = {}


def _meta_validator(cls: type) -> Any:
    # Same as cls.check_schema (which also asserts formats such as "regex" on the schema),
    # but bound to the offline registry: the stock default registry fetches unknown URLs.
    if cls not in _META_VALIDATORS:
        _META_VALIDATORS[cls] = cls(
            cls.META_SCHEMA, registry=OFFLINE_REGISTRY, format_checker=cls.FORMAT_CHECKER
        )
    return _META_VALIDATORS[cls]


def _unresolvable_refs(schema: Any, dialect: str, registry: Registry) -> Iterator[str]:
    """Yield every ``$ref``-like value reachable from ``schema`` that does not resolve offline.

    Walks the subschemas the dialect defines (tracking ``$id`` base-URI changes) and follows
    each resolved reference into its target once, so a registered document that itself points
    somewhere unreachable is caught too.
    """
    root_spec = specification_with(dialect)
    root = root_spec.create_resource(schema)
    stack = [(registry.resolver_with_root(root), root, root_spec)]
    visited: set[int] = set()
    while stack:
        resolver, resource, spec = stack.pop()
        contents = resource.contents
        if id(contents) in visited:
            continue
        visited.add(id(contents))
        if isinstance(contents, Mapping):
            for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
                ref = contents.get(keyword)
                if not isinstance(ref, str):
                    continue
                try:
                    resolved = resolver.lookup(ref)
                except Unresolvable:
                    yield ref
                    continue
                # The target may declare its own $schema; otherwise it inherits ours.
                target_spec = spec.detect(resolved.contents)
                target = target_spec.create_resource(resolved.contents)
                stack.append((resolved.resolver, target, target_spec))
        for sub in resource.subresources():
            stack.append((resolver.in_subresource(sub), sub, spec.detect(sub.contents)))


def check_schema(
    schema: dict, dialect: str | None = None, *, registry: Registry | None = None
) -> str:
    """Publish-time check; returns the canonical dialect URI or raises :class:`SchemaRefused`.

    ``reason`` is ``unsupported_dialect``, ``invalid_schema`` or ``unresolvable_ref``.
    """
    # `is None`, not `or`: a Registry is a mapping, and an empty one is falsy.
    registry = OFFLINE_REGISTRY if registry is None else registry
    uri = resolve_dialect(schema, dialect, registry=registry)
    cls = SUPPORTED_DIALECTS[uri]
    error = best_match(_meta_validator(cls).iter_errors(schema))
    if error is not None:
        where = _pointer(error.absolute_path) or "(root)"
        raise SchemaRefused("invalid_schema", f"schema at {where}: {error.message}")
    for ref in _unresolvable_refs(schema, uri, registry):
        raise SchemaRefused("unresolvable_ref", f"$ref {ref!r} cannot be resolved offline")
    return uri


# --------------------------------------------------------------------------- call time


def _pointer(path: Any) -> str:
    """RFC 6901 pointer for a jsonschema path deque."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _issue(error: ValidationError) -> ValidationIssue:
    return ValidationIssue(
        pointer=_pointer(error.absolute_path),
        # validator is None only for the boolean schema `false`.
        keyword=error.validator if error.validator is not None else "false",
        message=error.message,
        # keywordLocation in the spec's output terms: includes "$ref" steps it went through.
        schema_pointer=_pointer(error.absolute_schema_path),
    )


def _best_branch_leaves(error: ValidationError) -> Iterator[ValidationError]:
    """Leaf errors of the anyOf/oneOf/... branch that jsonschema's best_match descends into.

    Yields nothing when best_match finds the branches equally relevant: then the parent
    error ("not valid under any of the given schemas") is the whole story.
    """
    best = best_match([error])
    if best is error:
        return
    while best.parent is not error:
        best = best.parent
    branch = best.relative_schema_path[0]
    for child in error.context:
        if child.relative_schema_path and child.relative_schema_path[0] == branch:
            nested = list(_best_branch_leaves(child)) if child.context else []
            yield from nested or [child]


class CompiledValidator:
    """A jsonschema validator bound to one schema, dialect and format setting."""

    def __init__(self, validator: Any, dialect: str, format_assertion: bool) -> None:
        self._validator = validator
        self.dialect = dialect
        self.format_assertion = format_assertion

    def validate(self, instance: Any) -> list[ValidationIssue]:
        """Every issue (empty list = valid), sorted by (pointer, keyword, ...).

        Never raises for a schema that passed :func:`check_schema`; an unchecked schema can
        still fail here on an unresolvable ``$ref`` or a pattern ``re`` cannot compile.
        """
        issues: set[ValidationIssue] = set()
        for error in self._validator.iter_errors(instance):
            issues.add(_issue(error))
            # An anyOf/oneOf failure alone says little; add why its closest branch failed.
            if error.context:
                issues.update(_issue(leaf) for leaf in _best_branch_leaves(error))
        return sorted(
            issues, key=lambda i: (i.pointer, i.keyword, i.schema_pointer, i.message)
        )

    def is_valid(self, instance: Any) -> bool:
        return self._validator.is_valid(instance)

    def record(self) -> dict:
        """What SPEC §3 asks to store: validator name + version, dialect, format assertion."""
        return {
            "validator": VALIDATOR_NAME,
            "validator_version": VALIDATOR_VERSION,
            "dialect": self.dialect,
            "format_assertion": self.format_assertion,
        }


def compile_validator(
    schema: dict,
    *,
    dialect: str | None = None,
    format_assertion: bool = False,
    registry: Registry | None = None,
) -> CompiledValidator:
    """Compile ``schema``; it is expected to have passed :func:`check_schema` at publish time.

    For such a schema this does not raise (the dialect was already resolved once).
    """
    registry = OFFLINE_REGISTRY if registry is None else registry
    uri = resolve_dialect(schema, dialect, registry=registry)
    cls = SUPPORTED_DIALECTS[uri]
    kwargs: dict[str, Any] = {"registry": registry}
    if format_assertion:
        # Without a format checker "format" stays an annotation (the 2020-12 default).
        kwargs["format_checker"] = cls.FORMAT_CHECKER
    return CompiledValidator(cls(schema, **kwargs), uri, format_assertion)


VALIDATOR_CACHE_SIZE = 4096
_cache: OrderedDict[tuple, CompiledValidator] = OrderedDict()
_cache_lock = threading.Lock()


def cached_validator(
    cache_key: tuple,
    schema: dict,
    *,
    dialect: str | None = None,
    format_assertion: bool = False,
) -> CompiledValidator:
    """Compile once per ``cache_key`` (e.g. ``("calendar.create_event", 1)``), bounded LRU.

    Published ToolSpecs are immutable, so name+version identifies the schema; the schema is
    not hashed on each call (that would make a hit O(schema size)). Dialect and format setting
    are part of the key anyway, as they are cheap to compare.
    """
    key = (cache_key, dialect, format_assertion)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    compiled = compile_validator(schema, dialect=dialect, format_assertion=format_assertion)
    with _cache_lock:
        # Another thread may have compiled the same key meanwhile: keep the first one so
        # every caller sees the identical object.
        compiled = _cache.setdefault(key, compiled)
        _cache.move_to_end(key)
        while len(_cache) > VALIDATOR_CACHE_SIZE:
            _cache.popitem(last=False)
    return compiled


def clear_validator_cache() -> None:
    """Empty the :func:`cached_validator` cache (tests)."""
    with _cache_lock:
        _cache.clear()
