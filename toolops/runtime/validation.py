"""Structural validation of tool arguments (docs/concepts/admission.md, layer 2): JSON Schema bound to a dialect.

Pure Python on top of ``jsonschema`` + ``referencing``, with three corrections where stock
``jsonschema`` departs from the specification:

* ``pattern``, ``patternProperties`` (and the ``additionalProperties`` /
  ``unevaluatedProperties`` that depend on them) use ECMA-262 semantics through
  :mod:`toolops.runtime.ecma_regex` (the ``regex`` package), not Python's ``re``;
* formats are asserted by the strict RFC checkers of :mod:`toolops.runtime.formats`;
* a 2020-12 custom meta-schema's ``$vocabulary`` is honoured: keywords of a vocabulary it does
  not list are annotations, and listing ``format-assertion`` turns format assertion on.

Two moments matter:

* **publish time** — :func:`check_schema` refuses a ToolSpec schema whose dialect is not
  supported, which is not valid against its meta-schema, or whose ``$ref`` cannot be resolved
  offline. :class:`SchemaRefused` is raised here and nowhere else.
* **call time** — :func:`cached_validator` hands out a compiled validator per published
  ``(name, version)``; :meth:`CompiledValidator.validate` returns every issue, never raises.

Nothing here touches the network: every ``$ref`` resolves against :data:`OFFLINE_REGISTRY`
(the official meta-schemas) or a registry built from it by :func:`offline_registry_with`.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from importlib.metadata import version as _dist_version
from typing import Any

import jsonschema_specifications
from jsonschema import Draft7Validator, Draft201909Validator, Draft202012Validator, FormatChecker
from jsonschema import validators
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import specification_with

from toolops.runtime.ecma_regex import EcmaRegexError, compile_pattern
from toolops.runtime.formats import ASSERTED_FORMATS, FORMAT_CHECKER

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
PATTERN_ENGINE = f"ECMA-262 via regex {_dist_version('regex')}"
FORMAT_CHECKERS_NAME = "toolops.runtime.formats"

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


# --------------------------------------------------------------------------- ECMA-262 keywords
# jsonschema calls re.search() for these keywords, and for the patternProperties that
# additionalProperties / unevaluatedProperties must skip; the four are replaced together so a
# pattern means the same thing wherever it is used.


def _extras_msg(extras: list) -> tuple[str, str]:
    # jsonschema's wording for "(… was/were unexpected)", without importing its private helper.
    return ", ".join(repr(extra) for extra in extras), "was" if len(extras) == 1 else "were"


def _search(pattern: str, text: str) -> bool:
    return compile_pattern(pattern).search(text) is not None


def _pattern(validator, patrn, instance, schema):
    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator, pattern_properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in pattern_properties.items():
        for key, value in instance.items():
            if _search(patrn, key):
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _additional_keys(instance, schema):
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        key for key in instance
        if key not in properties and not any(_search(p, key) for p in patterns)
    ]


def _additional_properties(validator, additional, instance, schema):
    # jsonschema's keyword, with _additional_keys in place of its re-based helper.
    if not validator.is_type(instance, "object"):
        return
    extras = set(_additional_keys(instance, schema))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            error = "Additional properties are not allowed (%s %s unexpected)"
            yield ValidationError(error % _extras_msg(sorted(extras, key=str)))


def _is_valid(errors: Iterator) -> bool:
    return next(errors, None) is None


def _evaluated_keys(validator, instance, schema) -> set:
    """Keys evaluated by ``schema`` (2020-12 §11.3), as jsonschema's helper but ECMA patterns."""
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set = set()
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            # _resolver: how jsonschema's own keywords follow a $ref (no public accessor).
            resolved = validator._resolver.lookup(ref)
            keys |= _evaluated_keys(
                validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                instance, resolved.contents,
            )
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys |= {k for k, v in instance.items() if _is_valid(validator.descend(v, subschema))}
    for patrn in schema.get("patternProperties", {}):
        keys |= {k for k in instance if _search(patrn, k)}
    for prop, subschema in schema.get("dependentSchemas", {}).items():
        if prop in instance:
            keys |= _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _is_valid(validator.descend(instance, subschema)):
                keys |= _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_keys(validator, instance, schema["else"])
    return keys


def _unevaluated_properties(validator, unevaluated, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    failing = [
        key for key in instance
        if key not in evaluated
        and not _is_valid(validator.descend(instance[key], unevaluated, path=key, schema_path=key))
    ]
    if failing:
        if unevaluated is False:
            error = "Unevaluated properties are not allowed (%s %s unexpected)"
        else:
            error = "Unevaluated properties are not valid under the given schema (%s %s unevaluated and invalid)"
        yield ValidationError(error % _extras_msg(sorted(failing, key=str)))


_ECMA_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


def _toolops_class(base: type) -> type:
    keywords = dict(_ECMA_KEYWORDS)
    if base is Draft202012Validator:
        keywords["unevaluatedProperties"] = _unevaluated_properties
    # 2019-09's unevaluatedProperties keeps jsonschema's helper (Python `re`): its
    # $recursiveRef walk differs, and 2020-12 is the dialect ToolSpecs are written in.
    return validators.extend(base, keywords, format_checker=FORMAT_CHECKER)


# Stock class (identifies the dialect) -> the class that validates with ECMA patterns.
_TOOLOPS_CLASSES: dict[type, type] = {cls: _toolops_class(cls) for cls in _CANONICAL}

# 2020-12 vocabularies (§8.1.2, validation §6-9) -> the keywords they define.
_VOCAB = "https://json-schema.org/draft/2020-12/vocab/"
VOCABULARY_KEYWORDS: dict[str, frozenset[str]] = {
    _VOCAB + "core": frozenset({
        "$id", "$schema", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary",
        "$comment", "$defs",
    }),
    _VOCAB + "applicator": frozenset({
        "prefixItems", "items", "contains", "additionalProperties", "properties",
        "patternProperties", "dependentSchemas", "propertyNames", "if", "then", "else", "allOf",
        "anyOf", "oneOf", "not",
    }),
    _VOCAB + "unevaluated": frozenset({"unevaluatedItems", "unevaluatedProperties"}),
    _VOCAB + "validation": frozenset({
        "type", "const", "enum", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
        "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
        "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties",
        "required", "dependentRequired",
    }),
    _VOCAB + "meta-data": frozenset(),
    _VOCAB + "format-annotation": frozenset({"format"}),
    _VOCAB + "format-assertion": frozenset({"format"}),
    _VOCAB + "content": frozenset(),
}
FORMAT_ASSERTION_VOCABULARY = _VOCAB + "format-assertion"


def _vocabularies(schema: Any, registry: Registry) -> dict[str, bool] | None:
    """The ``$vocabulary`` of the custom meta-schema ``schema`` declares, if it has one."""
    uri = schema.get("$schema") if isinstance(schema, Mapping) else None
    if not isinstance(uri, str) or _supported(uri):
        return None  # a standard meta-schema: every vocabulary of its dialect
    try:
        meta = registry.resolver().lookup(uri).contents
    except Unresolvable:
        return None
    vocabulary = meta.get("$vocabulary") if isinstance(meta, Mapping) else None
    return dict(vocabulary) if isinstance(vocabulary, Mapping) else None


@functools.cache
def _class_for_vocabularies(base: type, vocabularies: frozenset[str]) -> type:
    """``base`` restricted to the keywords of ``vocabularies`` (the rest become annotations)."""
    allowed = set().union(*(VOCABULARY_KEYWORDS[v] for v in vocabularies if v in VOCABULARY_KEYWORDS))
    allowed |= VOCABULARY_KEYWORDS[_VOCAB + "core"]
    kept = {k: fn for k, fn in base.VALIDATORS.items() if k in allowed}
    return validators.create(
        meta_schema=base.META_SCHEMA, validators=kept, type_checker=base.TYPE_CHECKER,
        format_checker=FORMAT_CHECKER, id_of=base.ID_OF, applicable_validators=base._APPLICABLE_VALIDATORS,
    )


# --------------------------------------------------------------------------- publish time

def _can_compile_pattern(instance: Any) -> bool:
    try:
        compile_pattern(instance)
    except EcmaRegexError:
        return False
    return True


def _meta_format_checker() -> FormatChecker:
    # The meta-schema's formats ($id, $ref as uri-reference ...) keep jsonschema's checkers, so
    # publishing accepts what it accepted before; "regex" (pattern, patternProperties keys)
    # asks the one question that matters: can ToolOps run this pattern with ECMA-262 meaning.
    checker = FormatChecker(formats=())
    checker.checkers = {
        **Draft202012Validator.FORMAT_CHECKER.checkers,
        "regex": (lambda v: not isinstance(v, str) or _can_compile_pattern(v), ()),
    }
    return checker


_META_FORMAT_CHECKER = _meta_format_checker()
_META_VALIDATORS: dict[type, Any] = {}


def _meta_validator(cls: type) -> Any:
    # Same as cls.check_schema (which also asserts formats on the schema), but bound to the
    # offline registry: the stock default registry fetches unknown URLs.
    if cls not in _META_VALIDATORS:
        _META_VALIDATORS[cls] = cls(
            cls.META_SCHEMA, registry=OFFLINE_REGISTRY, format_checker=_META_FORMAT_CHECKER
        )
    return _META_VALIDATORS[cls]


def _subschemas(schema: Any, dialect: str) -> Iterator[Any]:
    """Every subschema the dialect defines (``properties`` members, ``$defs``, ``items`` ...)."""
    spec = specification_with(dialect)
    stack = [spec.create_resource(schema)]
    while stack:
        resource = stack.pop()
        yield resource.contents
        stack.extend(resource.subresources())


def formats_not_asserted(schema: Any, dialect: str = DIALECT_2020_12) -> list[str]:
    """``format`` values used in ``schema`` that ToolOps has no checker for (sorted)."""
    used = {
        sub["format"] for sub in _subschemas(schema, dialect)
        if isinstance(sub, Mapping) and isinstance(sub.get("format"), str)
    }
    return sorted(used - ASSERTED_FORMATS)


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
    schema: dict,
    dialect: str | None = None,
    *,
    registry: Registry | None = None,
    format_assertion: bool = False,
) -> str:
    """Publish-time check; returns the canonical dialect URI or raises :class:`SchemaRefused`.

    ``reason`` is ``unsupported_dialect``, ``invalid_schema``, ``unresolvable_ref``,
    ``unsupported_vocabulary`` (a required ``$vocabulary`` ToolOps does not know) or, with
    ``format_assertion``, ``unsupported_format`` (a ``format`` ToolOps cannot assert: asserting
    it would silently accept anything).
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
    vocabularies = _vocabularies(schema, registry) or {}
    unknown = sorted(v for v, required in vocabularies.items() if required and v not in VOCABULARY_KEYWORDS)
    if unknown and uri == DIALECT_2020_12:
        raise SchemaRefused("unsupported_vocabulary", f"required $vocabulary not supported: {', '.join(unknown)}")
    if format_assertion or FORMAT_ASSERTION_VOCABULARY in vocabularies:
        missing = formats_not_asserted(schema, uri)
        if missing:
            raise SchemaRefused(
                "unsupported_format",
                f"format assertion is on, but ToolOps cannot assert format {', '.join(map(repr, missing))}; "
                f"assertable formats: {', '.join(sorted(ASSERTED_FORMATS))}",
            )
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
        """What docs/concepts/admission.md asks to store: validator name + version, dialect, format assertion."""
        return {
            "validator": VALIDATOR_NAME,
            "validator_version": VALIDATOR_VERSION,
            "dialect": self.dialect,
            "format_assertion": self.format_assertion,
            # What ToolOps puts in jsonschema's place for patterns and formats (see module doc).
            "pattern_engine": PATTERN_ENGINE,
            "format_checkers": FORMAT_CHECKERS_NAME,
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
    cls = _TOOLOPS_CLASSES[SUPPORTED_DIALECTS[uri]]
    vocabularies = _vocabularies(schema, registry) if uri == DIALECT_2020_12 else None
    if vocabularies is not None:
        cls = _class_for_vocabularies(cls, frozenset(vocabularies))
        # A meta-schema listing format-assertion asks for it whatever its boolean says (§8.1.2).
        format_assertion = format_assertion or FORMAT_ASSERTION_VOCABULARY in vocabularies
    # Without a format checker "format" stays an annotation (the 2020-12 default).
    checker = FORMAT_CHECKER if format_assertion else None
    return CompiledValidator(cls(schema, registry=registry, format_checker=checker), uri, format_assertion)


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
