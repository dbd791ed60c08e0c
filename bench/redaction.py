"""The cost of secret redaction on the hot path: encoding one tool message.

    .venv/bin/python bench/redaction.py [-n 200] [--secrets 4]

Pure core only (``toolops.runtime``; no database, no broker). The message is a fetched web
page as the HTTP executor hands it over: a title, ~12 KB of prose with HTML entities,
percent-encoded links and numbers, 40 links, a few numbers — every string untrusted, as for any
external executor; the same page with 4,000 Chinese characters for prose (no ASCII fast
path); and a JSON API's list of 300 small records (many short strings). The policy carries ``--secrets`` configured tool credentials of the demo's shape
(``demo-cal-`` + 24 URL-safe characters), so every string and number is searched for every
secret in every form the matcher knows; none occurs (the common case). A last run puts one
secret into the page, split by a space and a zero-width space (the rare case that builds the
map back to the original text).

Reported: the median of ``--blocks`` blocks of ``-n`` encodings, CPU time per message, and the
matcher's one-off build time for the secret set (cached per process). The secrets are
generated from a fixed seed. The script also runs on the code before issue 29 (no
``SecretMatcher``), for the comparison in docs/redaction.md.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toolops.model_io import secret_forms  # noqa: E402
from toolops.model_io.tool_messages import ResultPolicy, ToolResult, encode_result  # noqa: E402

SMOKE = os.environ.get("BENCH_SMOKE") == "1"
WORDS = ("the harbour wakes before the city does and the ferries cross twice an hour while gulls "
         "argue over the fish market &amp; the tide tables &#8211; printed daily &mdash; hang by "
         "the door of every caf&eacute; on the quay 2026-07-20 09:00 +08:00 42.5% ").split()


def page(rng: random.Random, *, leak: str = "", chinese: bool = False) -> dict:
    prose = " ".join(rng.choice(WORDS) for _ in range(2000))[:12000]
    if chinese:  # no ASCII fast path: 4,000 CJK characters with fullwidth punctuation
        prose = "".join(chr(0x4E00 + rng.randrange(3000)) + ("\uff0c" if i % 12 == 11 else "") for i in range(4000))
    if leak:  # one secret, split by a space and a zero-width space, in the middle of the text
        half = len(leak) // 2
        prose = prose[:6000] + f" {leak[:half]} \u200b{leak[half:]} " + prose[6000:]
    links = [f"https://example.org/news/{rng.randrange(10**6)}?q=tide%20tables&page={i}" for i in range(40)]
    return {"url": "https://example.org/news", "status": 200, "title": "Harbour news &ndash; today",
            "text": prose, "links": links, "fetched_bytes": 48213, "elapsed_ms": 183.5}


def records(rng: random.Random) -> dict:
    """A JSON API's answer: 300 small objects, short strings, numbers, a literal."""
    return {"customers": [{"id": f"cus_{rng.randrange(10**9)}", "name": f"Customer {i}", "email": f"user{i}@example.org",
                           "score": rng.randrange(100), "active": True, "tags": ["vip", "eu"], "city": "Lyon"}
                          for i in range(300)]}


def secrets_for(rng: random.Random, n: int) -> tuple[str, ...]:
    alphabet = string.ascii_letters + string.digits + "-_"
    return tuple("demo-cal-" + "".join(rng.choice(alphabet) for _ in range(24)) for _ in range(n))


def median_us(fn, *, n: int, blocks: int) -> float:
    times = []
    for _ in range(blocks):
        start = time.process_time()  # CPU time: the machine is shared, wall time is noise
        for _ in range(n):
            fn()
        times.append((time.process_time() - start) / n)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=3 if SMOKE else 200)
    ap.add_argument("--blocks", type=int, default=1 if SMOKE else 7)
    ap.add_argument("--secrets", type=int, default=4)
    args = ap.parse_args()
    rng = random.Random(20260720)
    secrets = secrets_for(rng, args.secrets)
    policy = ResultPolicy(max_bytes=1 << 20, secrets=secrets)
    clean, leaking, chinese, listing = page(rng), page(rng, leak=secrets[0]), page(rng, chinese=True), records(rng)

    def encode(value):
        return encode_result(ToolResult(status="ok", value=value, untrusted_text_pointers=("",)),
                             policy=policy, invocation_id="00000000-0000-0000-0000-000000000000", tool_ref="web.fetch@1")

    if hasattr(secret_forms, "SecretMatcher"):
        start = time.process_time()
        secret_forms.SecretMatcher(secrets)
        build_ms = (time.process_time() - start) * 1e3
        print(f"matcher build for {len(secrets)} secrets: {build_ms:.1f} ms (once per process and secret set)")
    size = len(encode(clean).payload_bytes)
    print(f"message: {size} bytes, {len(secrets)} secrets")
    print(f"no secret in the page:    {median_us(lambda: encode(clean), n=args.n, blocks=args.blocks):8.0f} us per message")
    print(f"the same, in Chinese:     {median_us(lambda: encode(chinese), n=args.n, blocks=args.blocks):8.0f} us per message "
          f"({len(encode(chinese).payload_bytes)} bytes)")
    print(f"300 small records:        {median_us(lambda: encode(listing), n=max(1, args.n // 10), blocks=args.blocks):8.0f} us per message "
          f"({len(encode(listing).payload_bytes)} bytes, every string wrapped as untrusted)")
    leaked = encode(leaking)
    if not leaked.payload.get("redactions"):  # before issue 29 the split secret went through
        print("split secret in the page: NOT redacted")
    else:
        print(f"split secret in the page: {median_us(lambda: encode(leaking), n=args.n, blocks=args.blocks):8.0f} us per message")


if __name__ == "__main__":
    main()
