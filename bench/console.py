"""Console pages on a large history: server time and SQL queries per page, next to a bare query.

    createdb -h 127.0.0.1 -U postgres toolops_bench_console
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/toolops_bench_console .venv/bin/python bench/console.py

Runs ``migrate``; loads ``--invocations`` (1,000,000) invocations with ``--events-per-invocation``
(10) events each through ``manage.py load_bulk`` unless the database already holds that many
(a check of the row counts); then, with Django's test client signed in as a superuser, requests
each page ``-n`` (15) times after one warm-up request and reports the median server time (time
around ``client.get``: URL resolving, session, view, SQL, template rendering), the number of SQL
queries (``CaptureQueriesContext``; the same on every request or the bench says so), the time
the database spent on them, and the ratio to a bare
``SELECT * FROM invocations_app_invocation ORDER BY created_at DESC LIMIT 100`` on the same
connection. The changelists are also measured with ``list_per_page`` 50 and 100 to show the
number of queries does not depend on the page size. Target: every page ≤ 200 ms median.

The dashboard is measured three ways: "cold" clears the cache before every request (the whole
payload, including the attempts-per-tool rows that are kept for 60 s), "15-s refresh" expires
only the 15-s payload (what one request per 15 s per process pays), "cached" is what every other
request costs. Medians of one run; the machines are shared and noisy (docs/explanation/benchmarks.md), so compare
the ratios measured in one run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from control import dashboard  # noqa: E402
from invocations_app.admin import InvocationAdmin  # noqa: E402
from invocations_app.models import Confirmation, Event, Invocation  # noqa: E402

# BENCH_SMOKE=1 (CI's .ci/bench-smoke): the whole script at tiny sizes, to prove it still runs
# against real PostgreSQL and Redis; the numbers it prints then mean nothing.
SMOKE = os.environ.get("BENCH_SMOKE") == "1"
TARGET_MS = 200.0
BARE_SQL = "SELECT * FROM invocations_app_invocation ORDER BY created_at DESC LIMIT 100"
CHANGELIST = "/invocations_app/invocation/"


def ensure_loaded(invocations: int, events_per_invocation: float, batch: int) -> None:
    call_command("migrate", verbosity=0)
    have = Invocation.objects.count()
    if have >= invocations:
        print(f"data: {have:,} invocations already loaded (no load)")
        return
    if connection.vendor != "postgresql":
        raise SystemExit("bench/console.py needs PostgreSQL: DATABASE_URL=postgres://postgres@127.0.0.1:5432/toolops_bench_console")
    print(f"data: {have:,} invocations present, loading {invocations - have:,} more with load_bulk")
    call_command("load_bulk", invocations=invocations - have, events_per_invocation=events_per_invocation, batch=batch)


def describe_data() -> dict:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM invocations_app_event")
        events = cur.fetchone()[0]
    newest = Invocation.objects.order_by("-created_at").values_list("created_at", flat=True).first()
    info = {
        "invocations": Invocation.objects.count(), "events": events,
        "pending": Confirmation.objects.filter(state="pending").count(),
        "unknown": Invocation.objects.filter(state="OUTCOME_UNKNOWN").count(), "newest": newest,
    }
    print(f"data: {info['invocations']:,} invocations, {events:,} events, {info['pending']:,} pending confirmations, "
          f"{info['unknown']:,} OUTCOME_UNKNOWN; newest invocation {newest:%Y-%m-%d %H:%M} UTC")
    if newest and timezone.now() - newest > timedelta(days=1):
        print("note: the data set is more than a day old — the 24 h / 7 d windows hold less than at load time")
    return info


def measure(client: Client, url: str, n: int, *, before=None) -> dict:
    """Median server time of ``n`` requests (after one warm-up), query counts, SQL time."""
    if before:
        before()
    resp = client.get(url)
    assert resp.status_code == 200, (url, resp.status_code)
    times, counts, sql = [], [], []
    for _ in range(n):
        if before:
            before()
        with CaptureQueriesContext(connection) as q:
            t0 = time.perf_counter()
            resp = client.get(url)
            times.append((time.perf_counter() - t0) * 1000)
        assert resp.status_code == 200, (url, resp.status_code)
        counts.append(len(q.captured_queries))
        sql.append(sum(float(x["time"]) for x in q.captured_queries) * 1000)
    slowest = max(q.captured_queries, key=lambda x: float(x["time"]), default=None)
    return {
        "median": statistics.median(times), "p90": sorted(times)[max(0, int(len(times) * 0.9) - 1)],
        "queries": counts[-1], "stable": len(set(counts)) == 1, "sql": statistics.median(sql),
        "bytes": len(resp.content), "slowest": slowest,
    }


def bare(n: int) -> float:
    times = []
    with connection.cursor() as cur:
        cur.execute(BARE_SQL)
        cur.fetchall()
        for _ in range(n):
            t0 = time.perf_counter()
            cur.execute(BARE_SQL)
            cur.fetchall()
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def expire_payload(window: str):
    """What happens every 15 s: the payload expired, the attempts rows (kept longer) did not."""
    def apply():
        # The bench signs in as a superuser: the platform-wide ("all" tenants) payload.
        cache.delete(dashboard.CACHE_KEY.format(window=window, scope="all"))
    return apply


def with_page_size(size: int):
    def apply():
        InvocationAdmin.list_per_page = size
    return apply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--invocations", type=int, default=1_000_000)
    parser.add_argument("--events-per-invocation", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("-n", type=int, default=15, help="timed requests per page")
    parser.add_argument("--show-slowest", action="store_true", help="print each page's slowest SQL statement")
    if SMOKE:
        parser.set_defaults(invocations=300, events_per_invocation=3.0, batch=100, n=2)
    args = parser.parse_args()

    ensure_loaded(args.invocations, args.events_per_invocation, args.batch)
    describe_data()
    User = get_user_model()
    user = User.objects.filter(username="bench-root").first() or User.objects.create_superuser("bench-root", "root@example.invalid", None)
    client = Client()
    client.force_login(user)

    # One call's record: a recent calendar call that committed (confirmation, attempts, events).
    record = (Invocation.objects.filter(state="OBSERVED", tool_name="calendar.create_event")
              .order_by("-created_at").only("id").first() or Invocation.objects.order_by("-created_at").only("id").first())
    record_events = Event.objects.filter(invocation=record).count()
    default_size = InvocationAdmin.list_per_page
    pages = [
        ("dashboard, cold (cache cleared)", "/console/", cache.clear),
        ("dashboard, 15-s refresh (attempts still cached)", "/console/", expire_payload("24h")),
        ("dashboard, cached", "/console/", None),
        ("dashboard 7 d, cold", "/console/?window=7d", cache.clear),
        ("invocations, unfiltered (100/page)", CHANGELIST, with_page_size(100)),
        ("invocations, unfiltered (50/page)", CHANGELIST, with_page_size(50)),
        ("invocations, state=OBSERVED (100/page)", CHANGELIST + "?state__exact=OBSERVED", with_page_size(100)),
        ("invocations, state=OBSERVED (50/page)", CHANGELIST + "?state__exact=OBSERVED", with_page_size(50)),
        ("invocations, state=OUTCOME_UNKNOWN", CHANGELIST + "?state__exact=OUTCOME_UNKNOWN", with_page_size(100)),
        ("invocations, tool=calendar (100/page)", CHANGELIST + "?tool_name=calendar.create_event", with_page_size(100)),
        ("invocations, tool=calendar (50/page)", CHANGELIST + "?tool_name=calendar.create_event", with_page_size(50)),
        ("confirmation queue", "/console/confirmations/", None),
        (f"record, admin change page ({record_events} events)", f"{CHANGELIST}{record.pk}/change/", None),
        (f"record, console /console/calls/ ({record_events} events)", f"/console/calls/{record.pk}/", None),
    ]
    base = bare(args.n)
    results = []
    try:
        for label, url, before in pages:
            results.append((label, url, measure(client, url, args.n, before=before)))
    finally:
        InvocationAdmin.list_per_page = default_size
    print(f"\nmedian of {args.n} requests each; ratio = page / bare `{BARE_SQL}` ({base:.2f} ms)\n")
    print(f"{'page':<52} {'median ms':>9} {'p90 ms':>8} {'queries':>7} {'SQL ms':>8} {'KiB':>6} {'ratio':>7}  ≤{TARGET_MS:.0f} ms")
    print("-" * 112)
    print(f"{'bare SELECT * … ORDER BY created_at DESC LIMIT 100':<52} {base:9.2f} {'':>8} {1:7d} {base:8.2f} {'':>6} {1.0:7.1f}")
    for label, _url, r in results:
        flag = "yes" if r["median"] <= TARGET_MS else "NO"
        unstable = "" if r["stable"] else " (query count varied)"
        print(f"{label:<52} {r['median']:9.1f} {r['p90']:8.1f} {r['queries']:7d} {r['sql']:8.1f} {r['bytes'] / 1024:6.0f} "
              f"{r['median'] / base:7.1f}  {flag}{unstable}")
    sizes = {}
    for label, _url, r in results:
        if "/page)" in label:
            sizes.setdefault(label.rsplit(" (", 1)[0], []).append(r["queries"])
    print("\nqueries at 100 vs 50 rows per page: " + "; ".join(
        f"{k}: {' vs '.join(map(str, v))}{'' if len(set(v)) == 1 else ' (GROWS)'}" for k, v in sizes.items()))
    if args.show_slowest:
        print("\nslowest statement per page:")
        for label, _url, r in results:
            if r["slowest"]:
                print(f"- {label}: {float(r['slowest']['time']) * 1000:.1f} ms  {r['slowest']['sql'][:600]}")


if __name__ == "__main__":
    main()
