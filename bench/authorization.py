"""Authorization decisions per second vs the number of grants in the database.

    createdb -h 127.0.0.1 -U postgres toolops_bench   # once
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/toolops_bench .venv/bin/python bench/authorization.py

The decision path of ``invocations_app.authorization`` without a state transition:
``specs_app.selectors.grant_snapshots`` (one indexed query) + ``requirements_for`` + the pure
``toolops.decisions.authorization.authorize``. The measured subject holds 10 grants of the
capability its tool needs (10 exact-scope grants; exactly one covers each call, so every
decision evaluates all 10 and allows). The other grants are spread at random (fixed seed) over
other subjects, other tenants and 20 capabilities: a share of them (``--own-tenant-share``,
default 0.2 — one big tenant) in the subject's own tenant, held by its other subjects, about 1/20
of those for the same capability (``--same-capability-share`` concentrates them: 0.25 gives
~5,000 grants of one capability in one tenant at 100,000; ``--own-tenant-subjects 4`` puts
them on 4 subjects); 5% tenant-wide grants in the other tenants; 2% revoked. They
are added with ``bulk_create`` in batches of 5,000 between the sizes (10, 1,000, 100,000 grants in total), with
``ANALYZE`` after each fill. Each size runs ``--blocks`` blocks of ``-n`` decisions; the median
block is reported (wall time; the client's CPU time per decision beside it, which shared-machine
noise disturbs less), with the ratio time(largest)/time(smallest) (target <= 1.5), the buffers and
server time of the grant lookup at each size (load-independent), and the plan of the lookup at the
largest size (EXPLAIN ANALYZE of the exact SQL and parameters the selector sends) beside the plan
of the same lookup written as a plain queryset.

The script empties the database first (``flush``) so the sizes are exact: it refuses to run
unless the database name contains "bench" (override with --force).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Q  # noqa: E402
from django.utils import timezone  # noqa: E402

from specs_app.models import Capability, Grant, Subject, Tenant  # noqa: E402
from toolops import sql as sql_adapter  # noqa: E402
from specs_app.selectors import capability_classes, grant_snapshots  # noqa: E402
from toolops.decisions.authorization import AuthContext, Effect, authorize  # noqa: E402
from toolops.decisions.requirements import requirements_for  # noqa: E402

# BENCH_SMOKE=1 (CI's .ci/bench-smoke): the whole script at tiny sizes, to prove it still runs
# against real PostgreSQL and Redis; the numbers it prints then mean nothing.
SMOKE = os.environ.get("BENCH_SMOKE") == "1"
CAPABILITY = "weather.read"
DECLARED = [{"capability": CAPABILITY, "resource_pointer": "/city"}]
TOOL_REF = "weather.get_forecast@1"
OWN_GRANTS = 10
CITIES_PER_GRANT = 10
OTHER_TENANTS = 99
SUBJECTS_PER_TENANT = 20
OTHER_CAPABILITIES = 19
BATCH = 5000


class World:
    def __init__(self, own_tenant_share: float = 0.2, same_capability_share: float | None = None,
                 own_tenant_subjects: int = SUBJECTS_PER_TENANT):
        self.own_tenant_subjects = own_tenant_subjects
        self.own_tenant_share = own_tenant_share
        self.same_capability_share = same_capability_share
        self.rng = random.Random(20260719)  # same data on every run
        self.tenant = Tenant.objects.create(slug="bench", name="bench")
        self.subject = Subject.objects.create(tenant=self.tenant, name="bench-agent")
        self.caps = [Capability.objects.create(name=CAPABILITY, operation_class="read")] + [
            Capability.objects.create(name=f"bench.cap{i}", operation_class=("read", "create", "modify", "delete")[i % 4])
            for i in range(OTHER_CAPABILITIES)
        ]
        self.tenants = [self.tenant] + Tenant.objects.bulk_create(
            Tenant(slug=f"bench-other-{i}", name="other") for i in range(OTHER_TENANTS)
        )
        self.others: dict[int, list[Subject]] = {}
        for t in self.tenants:
            rows = Subject.objects.bulk_create(
                Subject(tenant=t, name=f"other-{j}") for j in range(SUBJECTS_PER_TENANT)
            )
            self.others[t.pk] = rows
        # The measured subject's own 10 grants: disjoint exact scopes of 10 cities each.
        Grant.objects.bulk_create(
            Grant(capability=self.caps[0], tenant=self.tenant, subject=self.subject, scope_kind="exact",
                  scope_values=[f"City {i * CITIES_PER_GRANT + j}" for j in range(CITIES_PER_GRANT)], reason="bench")
            for i in range(OWN_GRANTS)
        )
        self.total = OWN_GRANTS

    def other_grant(self, i: int, now) -> Grant:
        # ``own_tenant_share`` of them in the measured tenant (other subjects only), the rest over 99 tenants.
        rng = self.rng
        own = rng.random() < self.own_tenant_share
        tenant = self.tenant if own else self.tenants[rng.randrange(1, len(self.tenants))]
        tenant_wide = not own and rng.random() < 0.05
        capability = rng.choice(self.caps)
        if own and self.same_capability_share is not None:
            capability = self.caps[0] if rng.random() < self.same_capability_share else rng.choice(self.caps[1:])
        return Grant(
            capability=capability, tenant=tenant,
            subject=None if tenant_wide else rng.choice(self.others[tenant.pk][: self.own_tenant_subjects if own else None]),
            scope_kind="exact", scope_values=[f"City {rng.randrange(1000)}"], limits={}, reason="bench",
            revoked_at=now if rng.random() < 0.02 else None,
        )

    def fill(self, size: int) -> None:
        now = timezone.now()
        while self.total < size:
            count = min(BATCH, size - self.total)
            Grant.objects.bulk_create([self.other_grant(self.total + k, now) for k in range(count)], batch_size=BATCH)
            self.total += count
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE specs_app_grant")


def decide(world: World, k: int):
    classes = capability_classes([CAPABILITY])
    requirements = requirements_for(declared=DECLARED, operation_classes=classes, arguments={"city": f"City {k % 100}"})
    grants = grant_snapshots(tenant=world.tenant, subject=world.subject, capabilities=[CAPABILITY])
    ctx = AuthContext(tenant=world.tenant.slug, subject_id=str(world.subject.pk), tool_ref=TOOL_REF, now=timezone.now())
    return authorize(requirements=requirements, grants=grants, ctx=ctx), len(grants)


def block(world: World, n: int, cpu: list | None = None) -> float:
    start, start_cpu = time.perf_counter(), time.process_time()
    for k in range(n):
        decide(world, k)
    if cpu is not None:
        cpu.append(time.process_time() - start_cpu)
    return time.perf_counter() - start


Statement = tuple[str, list]  # SQL with %s placeholders, and its parameters


@contextmanager
def sent_statements():
    """Every statement sent while inside, with its parameters, as the driver received them.

    Django's cursors are seen through ``execute_wrapper``; ``toolops.sql`` sends its lean
    reads on a server-binding psycopg cursor of its own, seen by wrapping ``execute_one``. (A
    query log holds only the SQL text, and with server-side binding that text has placeholders:
    EXPLAIN needs the parameters too.)
    """
    seen: list[Statement] = []

    def through_django(execute, sql, params, many, context):
        seen.append((sql, list(params or ())))
        return execute(sql, params, many, context)

    execute_one = getattr(sql_adapter, "execute_one", None)

    def through_sql_adapter(sql, params, *args, **kwargs):
        seen.append((sql, list(params or ())))
        return execute_one(sql, params, *args, **kwargs)

    if execute_one:
        sql_adapter.execute_one = through_sql_adapter
    try:
        with connection.execute_wrapper(through_django):
            yield seen
    finally:
        if execute_one:
            sql_adapter.execute_one = execute_one


def lookup_statement(world: World) -> Statement:
    """The exact statement ``grant_snapshots`` sends, with its parameters."""
    with sent_statements() as seen:
        grant_snapshots(tenant=world.tenant, subject=world.subject, capabilities=[CAPABILITY])
    if not seen:
        raise SystemExit("grant_snapshots sent no statement this bench can see: update sent_statements()")
    return seen[-1]


def explain(statement: Statement) -> list[str]:
    sql, params = statement
    prefix = "EXPLAIN (ANALYZE, BUFFERS) " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
    with connection.cursor() as cursor:
        cursor.execute(prefix + sql, params)
        return [" | ".join(str(c) for c in row) for row in cursor.fetchall()]


def shown(statement: Statement) -> str:
    sql, params = statement
    return f"{sql}\n  parameters: {params}"


def server_cost(statement: Statement) -> str:
    """Load-independent view of the lookup: buffers touched and server execution time (PostgreSQL)."""
    if connection.vendor != "postgresql":
        return "n/a"
    for _ in range(3):  # warm the plan and the buffers
        plan = explain(statement)
    hits = next((line.split("shared hit=")[1].split()[0] for line in plan if "shared hit=" in line), "?")
    ms = next((line.split(":")[1].strip() for line in plan if line.startswith("Execution Time")), "?")
    return f"{hits} buffers, {ms}"


def orm_variant_statement(world: World) -> Statement:
    """For comparison only: the same lookup as a plain queryset (capability id resolved first,
    the capability row joined back by ``select_related``)."""
    qs = (
        Grant.objects.filter(tenant=world.tenant, capability_id__in=[world.caps[0].pk], revoked_at__isnull=True)
        .filter(Q(subject__isnull=True) | Q(subject=world.subject))
        .select_related("capability")
    )
    with sent_statements() as seen:
        list(qs)
    return seen[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=2000, help="decisions per block")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--sizes", default="10,1000,100000")
    parser.add_argument("--own-tenant-share", type=float, default=0.2,
                        help="share of the other grants in the measured subject's tenant (0.2 = a big tenant; 0.01 = uniform)")
    parser.add_argument("--same-capability-share", type=float, default=None,
                        help="share of the own-tenant grants on the measured capability (default: random, ~1/20)")
    parser.add_argument("--own-tenant-subjects", type=int, default=SUBJECTS_PER_TENANT,
                        help="how many other subjects of the measured tenant hold its other grants (default 20)")
    parser.add_argument("--force", action="store_true", help="flush a database whose name lacks 'bench'")
    if SMOKE:
        parser.set_defaults(n=20, blocks=2, sizes="10,1000")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if sizes[0] < OWN_GRANTS:
        parser.error(f"sizes start at {OWN_GRANTS} (the subject's own grants)")

    name = str(connection.settings_dict["NAME"])
    if "bench" not in name and not args.force:
        sys.exit(f"refusing to flush database {name!r}: use a *bench* database or --force")
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    world = World(own_tenant_share=args.own_tenant_share, same_capability_share=args.same_capability_share,
                  own_tenant_subjects=args.own_tenant_subjects)

    decision, seen = decide(world, 0)
    assert decision.effect == Effect.ALLOW and seen == OWN_GRANTS, (decision, seen)
    print(f"database: {connection.vendor} ({name})   {args.blocks} blocks x {args.n} decisions per size")
    print(f"subject holds {OWN_GRANTS} grants of {CAPABILITY}; each decision loads and evaluates all of them")
    print(f"{'grants':>9}  {'live':>9}  {'same tenant+cap':>15}  {'decisions/s':>11}  {'us/decision':>11}  "
          f"{'client cpu us':>13}  {'lookup on the server':>26}  blocks (decisions/s)")
    medians: dict[int, float] = {}
    bests: dict[int, float] = {}
    for size in sizes:
        world.fill(size)
        block(world, min(200, args.n))  # warm: connection, caches, plan
        cpu: list[float] = []
        times = [block(world, args.n, cpu) for _ in range(args.blocks)]
        medians[size] = statistics.median(times)
        bests[size] = min(times)
        _, seen = decide(world, 1)
        assert seen == OWN_GRANTS, seen  # the snapshot never grows with other people's grants
        live = Grant.objects.filter(revoked_at__isnull=True).count()
        same = Grant.objects.filter(tenant=world.tenant, capability=world.caps[0]).count()
        rates = ", ".join(f"{args.n / t:.0f}" for t in times)
        cost = server_cost(lookup_statement(world))
        print(f"{size:9,d}  {live:9,d}  {same:15,d}  {args.n / medians[size]:11.0f}  {medians[size] / args.n * 1e6:11.1f}  "
              f"{statistics.median(cpu) / args.n * 1e6:13.1f}  {cost:>26}  {rates}")
    lo, hi = sizes[0], sizes[-1]
    print(f"ratio time({hi:,})/time({lo:,}): {medians[hi] / medians[lo]:.2f} (medians of blocks), "
          f"{bests[hi] / bests[lo]:.2f} (best blocks)  (target <= 1.5)")
    lookup = lookup_statement(world)
    print(f"\ngrant lookup at {hi:,} grants (the selector's SQL):\n{shown(lookup)}\n")
    print("\n".join(explain(lookup)))
    variant = orm_variant_statement(world)
    print(f"\nfor comparison, the same lookup as a plain queryset:\n{shown(variant)}\n")
    print("\n".join(explain(variant)))


if __name__ == "__main__":
    main()
