"""`manage.py audit_invariants`: report every stored violation of docs/concepts/lifecycle.md's invariants.

Exit status 0 when the audited history is clean, 1 when any violation was found (also 1, with
a message, for bad arguments). Violations go to stdout — one line each, or one JSON document
with ``--json`` — and progress to stderr, so ``> report.txt`` keeps only the findings.
See ``audit.checks`` for what each kind means and how the scan stays flat in memory.
"""
from __future__ import annotations

import json
import time
from collections import Counter

from django.core.management.base import BaseCommand, CommandError

from audit.checks import DEFAULT_CHUNK_SIZE, KINDS, audit, parse_since


class Command(BaseCommand):
    help = (
        "Scan invocations and their event logs for violations of the lifecycle's invariants (edges, authorization, "
        "confirmation digests, commits undone, digest reproducibility, events after terminal, seq gaps). "
        "Exits 1 when any is found."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--since", metavar="WHEN",
            help="only invocations created at/after WHEN: an ISO date or datetime, or a duration back from now "
                 "(24h, 7d, 90m, 2w, 1d12h)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON document instead of text lines")
        parser.add_argument(
            "--limit-report", type=int, default=100, metavar="N",
            help="print at most N violations per kind (0 = all); the summary always counts every one (default 100)",
        )
        parser.add_argument(
            "--progress-every", type=int, default=20000, metavar="N",
            help="report progress on stderr every N invocations (default 20000; 0 = only the final count)",
        )
        parser.add_argument(
            "--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, metavar="N",
            help=f"invocations read per page (default {DEFAULT_CHUNK_SIZE})",
        )
        parser.add_argument(
            "--kind", action="append", dest="kinds", choices=KINDS, metavar="KIND",
            help=f"check only this kind (repeatable): {', '.join(KINDS)}",
        )

    def handle(self, *args, **options):
        since = options.get("since")
        if isinstance(since, str):
            try:
                since = parse_since(since)
            except ValueError as exc:
                raise CommandError(str(exc), returncode=2) from None
        limit = int(options.get("limit_report") or 0)
        every = int(options.get("progress_every") or 0)
        chunk_size = int(options.get("chunk_size") or DEFAULT_CHUNK_SIZE)
        if limit < 0 or every < 0 or chunk_size < 1:
            raise CommandError("--limit-report and --progress-every must be >= 0, --chunk-size >= 1", returncode=2)
        kinds = options.get("kinds") or list(KINDS)
        as_json = bool(options.get("json"))

        counts: Counter = Counter()
        stats: Counter = Counter()
        shown: list[dict] = []
        reported = {"at": 0}
        started = time.monotonic()

        def progress(checked: int) -> None:
            if every and checked // every > reported["at"] // every:
                self.stderr.write(f"checked {checked} invocations… ({sum(counts.values())} violation(s) so far)")
                reported["at"] = checked

        scope = f"since {since.isoformat()}" if since else "all invocations"
        self.stderr.write(f"auditing {scope} for: {', '.join(kinds)}")
        for violation in audit(since=since, kinds=kinds, chunk_size=chunk_size, progress=progress, stats=stats):
            counts[violation.kind] += 1
            if limit and counts[violation.kind] > limit:
                continue
            if as_json:
                shown.append(violation.as_dict())
            else:
                self.stdout.write(f"{violation.kind}\t{violation.invocation_id}\t{violation.detail}")

        total = sum(counts.values())
        elapsed = time.monotonic() - started
        self.stderr.write(
            f"checked {stats['invocations']} invocations ({stats['events']} events) in {elapsed:.1f}s"
            + (f"; {stats['digests_unverifiable']} digest(s) recorded by another normalizer/parser version "
               f"were not re-run" if stats["digests_unverifiable"] else "")
        )
        if as_json:
            self.stdout.write(json.dumps({
                "ok": total == 0,
                "since": since.isoformat() if since else None,
                "kinds": list(kinds),
                "checked": {"invocations": stats["invocations"], "events": stats["events"],
                            "digests": stats["digests_checked"], "digests_unverifiable": stats["digests_unverifiable"]},
                "summary": {kind: counts[kind] for kind in kinds},
                "total": total,
                "violations": shown,
                "truncated": {kind: counts[kind] - limit for kind in kinds if limit and counts[kind] > limit},
            }, ensure_ascii=False, indent=2))
        else:
            self.stdout.write("summary:")
            for kind in kinds:
                hidden = counts[kind] - limit if limit and counts[kind] > limit else 0
                self.stdout.write(f"  {kind}: {counts[kind]}" + (f" ({hidden} not listed, --limit-report {limit})" if hidden else ""))
            if total:
                self.stdout.write(self.style.ERROR(f"{total} violation(s) in {stats['invocations']} invocations"))
            else:
                self.stdout.write(self.style.SUCCESS(f"no violations in {stats['invocations']} invocations"))
        if total:
            raise CommandError(f"{total} invariant violation(s) found", returncode=1)
