"""``GET /metrics`` for Prometheus (docs/how-to/operate.md): not public. It answers only
``Authorization: Bearer <TOOLOPS_METRICS_TOKEN>``; with no token configured, or a wrong one, it
is a 404 — a scraper learns nothing about the endpoint without the credential.
"""
from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpResponse, HttpResponseNotFound
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from invocations_app.operations import operational_gauges
from toolops.metrics import exposition


def _authorised(request) -> bool:
    expected = settings.TOOLOPS_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # Constant time: the comparison does not tell how much of a guess was right.
    return bool(expected) and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected.encode())


@require_GET
def metrics(request):
    if not _authorised(request):
        return HttpResponseNotFound(b"not found\n", content_type="text/plain")  # never the debug URL list
    return HttpResponse(exposition(operational_gauges), content_type=CONTENT_TYPE_LATEST)
