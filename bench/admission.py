"""Admission throughput vs a bare baseline, and per-proposal memory vs the number of ToolSpecs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/toolops .venv/bin/python bench/admission.py

Two pipelines, HTTP excluded, each next to the same bare baseline:

* admission (the scope of the admission issue: the pipeline stops at VALIDATED): strict parse,
  schema validation, normalization, digest, then proposal + invocation + its 3 events written
  in one round trip — ``toolops.runtime.admission.admit`` + ``admission.record_admission`` with
  no authorization, the path an approver's edit takes before it is authorized;
* full ``admission.proposal_admit``, what an agent's POST runs: the above plus the grant read,
  the authorization decision and its event, and the Celery enqueue of the AUTHORIZED call.

Baseline, same run, same arguments: ``jsonschema`` validation of the parsed arguments plus one
ORM insert of the same bytes (autocommit). Blocks alternate to spread machine noise; the
median of the block rates is reported with the ratios pipeline/baseline (target >= 0.5).
``--metrics``: ``proposal_admit`` again with the Prometheus metrics on and off, alternating blocks
(docs/explanation/benchmarks.md). Then: tracemalloc peak of one admission with 10, 100, 1,000 and 10,000 published ToolSpecs
whose validators are all compiled and cached (target: flat).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")

import django  # noqa: E402

django.setup()

import jsonschema  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from invocations_app import admission, runs  # noqa: E402
from invocations_app.models import Proposal  # noqa: E402
from devtools.demo import DEMO_TOOLSPECS  # noqa: E402
from specs_app.models import Capability, Grant, Subject, Tenant, ToolSpec  # noqa: E402
from specs_app.selectors import tool_view  # noqa: E402
from specs_app.services import toolspec_publish  # noqa: E402
from toolops import metrics  # noqa: E402
from toolops.runtime.admission import admit  # noqa: E402
from toolops.runtime.normalizers import NormalizationContext  # noqa: E402
from toolops.runtime.validation import cached_validator  # noqa: E402

# BENCH_SMOKE=1 (CI's .ci/bench-smoke): the whole script at tiny sizes, to prove it still runs
# against real PostgreSQL and Redis; the numbers it prints then mean nothing.
SMOKE = os.environ.get("BENCH_SMOKE") == "1"
WEATHER = next(s for s in DEMO_TOOLSPECS if s["name"] == "weather.get_forecast")
ARGS = [f'{{"city": "City {i % 97}", "date": "2026-07-{10 + i % 19:02d}"}}'.encode() for i in range(1000)]


def setup(tag: str):
    call_command("migrate", verbosity=0)
    tenant = Tenant.objects.create(slug=f"bench-{tag}", name="bench")
    subject = Subject.objects.create(tenant=tenant, name="bench-agent")
    spec = ToolSpec.objects.create(**{**WEATHER, "name": f"bench{tag}.weather", "version": 1})
    toolspec_publish(spec=spec)
    # A realistic path: the subject holds weather.read, so each proposal ends AUTHORIZED.
    capability, _ = Capability.objects.get_or_create(name="weather.read", defaults={"operation_class": "read"})
    Grant.objects.create(capability=capability, tenant=tenant, subject=subject, scope_kind="any", reason="bench")
    run = runs.run_create(subject=subject, budgets={}, timezone_name="Asia/Shanghai", locale="en-US", metadata={}, trace=None)
    call = runs.model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])
    return subject, spec, call


def pipeline_block(subject, spec, call, n: int, offset: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        admission.proposal_admit(
            model_call=call, subject=subject, proposal_id=f"p{offset + i}", name=spec.ref, arguments_bytes=ARGS[i % len(ARGS)]
        )
    return n / (time.perf_counter() - start)


def admission_block(subject, spec, call, n: int, offset: int) -> float:
    run, limits = call.run, admission.parser_limits()
    start = time.perf_counter()
    for i in range(n):
        raw = ARGS[i % len(ARGS)]
        now = timezone.now()
        context = NormalizationContext(clock=now.astimezone(ZoneInfo(run.timezone)), timezone=run.timezone, locale=run.locale)
        plan = admit(arguments_bytes=raw, tool=tool_view(spec), visible_names=[spec.ref], tenant=subject.tenant.slug,
                     context=context, limits=limits)
        admission.record_admission(
            model_call=call, run=run, subject=subject, proposal_id=f"a{offset + i}", name=spec.ref, arguments_bytes=raw,
            spec=spec, plan=plan, auth=None, context=context, limits=limits, idempotency_key=None, trace=None,
        )
    return n / (time.perf_counter() - start)


def baseline_block(call, validator, n: int, offset: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        raw = ARGS[i % len(ARGS)]
        list(validator.iter_errors(json.loads(raw)))
        Proposal.objects.create(model_call=call, proposal_id=f"b{offset + i}", name="bare", arguments_bytes=raw, span_id="0" * 16)
    return n / (time.perf_counter() - start)


def throughput(n: int, blocks: int) -> None:
    subject, spec, call = setup(uuid.uuid4().hex[:8])
    validator = jsonschema.Draft202012Validator(spec.input_schema)
    pipeline_block(subject, spec, call, 50, 10**7)  # warm: caches, connection
    baseline_block(call, validator, 50, 10**7)
    admission_block(subject, spec, call, 50, 10**7)
    pipe, adm, bare = [], [], []
    for b in range(blocks):
        bare.append(baseline_block(call, validator, n, b * n))
        adm.append(admission_block(subject, spec, call, n, b * n))
        pipe.append(pipeline_block(subject, spec, call, n, b * n))
    p, a, q = statistics.median(pipe), statistics.median(adm), statistics.median(bare)
    print(f"database: {connection.vendor}  blocks: {blocks} x {n} proposals")
    print(f"baseline (jsonschema + 1 ORM insert):      {q:8.0f} /s   blocks: {', '.join(f'{x:.0f}' for x in bare)}")
    print(f"admission (parse..digest, record):         {a:8.0f} /s   blocks: {', '.join(f'{x:.0f}' for x in adm)}")
    print(f"proposal_admit (+ authorize + enqueue):    {p:8.0f} /s   blocks: {', '.join(f'{x:.0f}' for x in pipe)}")
    print(f"ratio admission/baseline: {a / q:.2f}  (target >= 0.5)")
    print(f"ratio proposal_admit/baseline: {p / q:.2f}")


def metrics_overhead(n: int, blocks: int) -> None:
    """``proposal_admit`` with the Prometheus counters on and off (``toolops.metrics.ENABLED``) in
    short back-to-back pairs, which of the two goes first alternating: on a shared machine whose
    speed drifts within seconds, the median of the pairs' ratios is steadier than two medians.
    Also the counting itself, timed alone, against one proposal_admit (goal: within 5 %)."""
    subject, spec, call = setup(uuid.uuid4().hex[:8])
    pipeline_block(subject, spec, call, 50, 10**9)  # warm
    size, pairs = max(5, n // 5), blocks * 5
    ratios, rates = [], {True: [], False: []}
    for b in range(pairs):
        pair = {}
        for enabled in ((True, False) if b % 2 else (False, True)):
            metrics.ENABLED = enabled
            pair[enabled] = pipeline_block(subject, spec, call, size, 10**8 + (2 * b + enabled) * size)
            rates[enabled].append(pair[enabled])
        ratios.append(pair[True] / pair[False])
    metrics.ENABLED = True
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"proposal_admit, metrics off: {off:8.0f} /s   on: {on:8.0f} /s   ({pairs} pairs of {size})")
    print(f"metrics overhead on admission (median of pair ratios): {(1 - statistics.median(ratios)) * 100:+.1f} %"
          "  (goal: within 5 %)")
    # What admission adds when counting, timed alone, as a share of one proposal_admit.
    reps = 2000 if not SMOKE else 50
    started = time.perf_counter()
    for _ in range(reps):
        metrics.proposal_admitted(tool=spec.name, tenant=subject.tenant.slug, state="AUTHORIZED", needs_person=False)
    each = (time.perf_counter() - started) / reps
    print(f"one admission's counting: {each * 1e6:.1f} µs = {each * off * 100:.2f} % of a proposal_admit")


def memory(sizes: list[int]) -> None:
    tag = uuid.uuid4().hex[:8]
    subject, spec, call = setup(tag)
    created = 0
    print("ToolSpecs  validators cached  peak bytes per admission")
    for size in sizes:
        now = timezone.now()
        ToolSpec.objects.bulk_create(
            ToolSpec(**{**WEATHER, "name": f"bench{tag}.t{i}", "version": 1, "status": "published", "published_at": now})
            for i in range(created, size)
        )
        for i in range(created, size):
            cached_validator((f"bench{tag}.t{i}", 1), WEATHER["input_schema"], dialect=None, format_assertion=False)
        created = size
        peaks = []
        for k in range(5):
            tracemalloc.start()
            admission.proposal_admit(model_call=call, subject=subject, proposal_id=f"m{size}-{k}", name=spec.ref, arguments_bytes=ARGS[k])
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        print(f"{size:9d}  {size:17d}  {statistics.median(peaks):10.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=500, help="proposals per block")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--metrics", action="store_true", help="also compare proposal_admit with metrics on and off")
    if SMOKE:
        parser.set_defaults(n=10, blocks=2, sizes="10,100", metrics=True)
    args = parser.parse_args()
    throughput(args.n, args.blocks)
    if args.metrics:
        metrics_overhead(args.n, args.blocks)
    memory([int(s) for s in args.sizes.split(",")])


if __name__ == "__main__":
    main()
